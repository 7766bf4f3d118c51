//! One batch on PostgreSQL: the pool writer's lookups and writes as three fixed statements over
//! arrays (`UNNEST`), so each is parsed and planned once per connection, not once per batch size.
//!
//! A batch is `BEGIN`, one lookup of stored answers (duplicates and claimed messages), one
//! row-locking lookup of leases, one statement that writes every table through data-modifying
//! `WITH` clauses, and `COMMIT`: five round trips whatever the batch holds. Multi-row `VALUES`
//! lists and `IN (...)` lists made PostgreSQL parse and plan a new statement text for almost
//! every batch, which cost it more CPU than the rows themselves.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use sea_orm::sqlx::{self, PgPool, Postgres, Row, Transaction};
use sea_orm::{DbErr, RuntimeErr};
use switchyard_router::entities::entity_lock;
use switchyard_router::entities::run::RunStatus;
use switchyard_router::now_millis;

use super::decide::{self, Decided, Found, Lookups, SourceKey};
use super::{Answer, Delivery};
use crate::live::Live;

/// Plans are made for each execution's arrays against the tables as they are now. A cached
/// generic plan is made once per connection, and one made while the tables were still empty
/// scans them whole (hash joins, sequential scans) long after they have grown.
const BEGIN: &str =
    "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL plan_cache_mode = force_custom_plan";

/// One transaction: look up, decide, write, commit.
pub(super) async fn commit_batch(
    pool: &PgPool,
    live: &Live,
    deliveries: &[&Delivery],
) -> Result<Vec<Answer>, DbErr> {
    let now = now_millis();
    let mut txn = pool.begin_with(BEGIN).await.map_err(db_err)?;
    let lookups = Lookups::needed(deliveries, live);
    let (seen, claimed) = first_answers(&mut txn, &lookups.deliveries, &lookups.messages).await?;
    let found = Found {
        seen,
        claimed,
        leases: leases(&mut txn, &lookups.leases).await?,
    };
    let decided = decide::decide(deliveries, lookups, found, live, now);
    let answers = write(&mut txn, decided).await?;
    txn.commit().await.map_err(db_err)?;
    Ok(answers)
}

/// Stored answers by delivery id (`false`) and by claimed message key (`true`).
const FIRST_ANSWERS: &str = "\
    SELECT false, k.source, k.key, i.id, i.outcome, i.detail, i.run_id, i.workflow_id, \
           i.held_by_run_id \
    FROM UNNEST($1::text[], $2::text[]) AS k(source, key) \
    JOIN intake i ON i.delivery_id = k.key AND i.source = k.source \
    UNION ALL \
    SELECT true, k.source, k.key, i.id, i.outcome, i.detail, i.run_id, i.workflow_id, \
           i.held_by_run_id \
    FROM UNNEST($3::text[], $4::text[]) AS k(source, key) \
    JOIN intake i ON i.message_key = k.key AND i.source = k.source";

/// The answer of the ledger row of each `(source, delivery_id)` and of the routed row that
/// claimed each `(source, message_key)`.
async fn first_answers(
    txn: &mut Transaction<'static, Postgres>,
    deliveries: &[(&str, &str)],
    messages: &[(&str, &str)],
) -> Result<(HashMap<SourceKey, Answer>, HashMap<SourceKey, Answer>), DbErr> {
    let (delivery_sources, delivery_ids): (Vec<&str>, Vec<&str>) =
        deliveries.iter().copied().unzip();
    let (message_sources, message_keys): (Vec<&str>, Vec<&str>) = messages.iter().copied().unzip();
    let rows = sqlx::query(FIRST_ANSWERS)
        .bind(delivery_sources)
        .bind(delivery_ids)
        .bind(message_sources)
        .bind(message_keys)
        .fetch_all(&mut **txn)
        .await
        .map_err(db_err)?;
    let (mut seen, mut claimed) = (HashMap::new(), HashMap::new());
    for row in rows {
        let outcome: String = row.try_get(4).map_err(db_err)?;
        let answer = decide::recorded_answer(
            row.try_get(3).map_err(db_err)?,
            &outcome,
            row.try_get(5).map_err(db_err)?,
            row.try_get(6).map_err(db_err)?,
            row.try_get(7).map_err(db_err)?,
            row.try_get(8).map_err(db_err)?,
        );
        let key = (
            row.try_get(1).map_err(db_err)?,
            row.try_get(2).map_err(db_err)?,
        );
        let by_message: bool = row.try_get(0).map_err(db_err)?;
        if by_message { &mut claimed } else { &mut seen }.insert(key, answer);
    }
    Ok((seen, claimed))
}

const LEASES: &str = "\
    SELECT l.tenant_id, l.target_entity_id, l.run_id, l.fencing_token, l.expires_at, \
           l.updated_at \
    FROM UNNEST($1::text[], $2::text[]) AS k(tenant_id, target_entity_id) \
    JOIN entity_locks l \
      ON l.target_entity_id = k.target_entity_id AND l.tenant_id = k.tenant_id \
    FOR UPDATE OF l";

/// The lease rows of `(tenant_id, target_entity_id)` keys that have one, row-locked until the
/// commit (keys in sorted order, so two replicas lock shared rows in the same order).
async fn leases(
    txn: &mut Transaction<'static, Postgres>,
    keys: &[(String, String)],
) -> Result<Vec<entity_lock::Model>, DbErr> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let (tenants, entities): (Vec<&str>, Vec<&str>) = keys
        .iter()
        .map(|(tenant, entity)| (tenant.as_str(), entity.as_str()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .unzip();
    let rows = sqlx::query(LEASES)
        .bind(tenants)
        .bind(entities)
        .fetch_all(&mut **txn)
        .await
        .map_err(db_err)?;
    rows.iter()
        .map(|row| {
            Ok(entity_lock::Model {
                tenant_id: row.try_get(0)?,
                target_entity_id: row.try_get(1)?,
                run_id: row.try_get(2)?,
                fencing_token: row.try_get(3)?,
                expires_at: row.try_get(4)?,
                updated_at: row.try_get(5)?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(db_err)
}

/// Every write of a batch in one statement. Each `WITH` clause is a no-op for empty arrays.
/// A lease created meanwhile by another replica makes `created` fail and the batch retry.
const WRITE: &str = "\
WITH created AS ( \
    INSERT INTO entity_locks \
        (tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at) \
    SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int8[], $5::int8[], \
                         $6::int8[]) \
), changed AS ( \
    UPDATE entity_locks AS l \
    SET run_id = c.run_id, fencing_token = c.fencing_token, expires_at = c.expires_at, \
        updated_at = c.updated_at \
    FROM UNNEST($7::text[], $8::text[], $9::text[], $10::int8[], $11::int8[], $12::int8[]) \
        AS c(tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at) \
    WHERE l.target_entity_id = c.target_entity_id AND l.tenant_id = c.tenant_id \
), new_runs AS ( \
    INSERT INTO runs (id, tenant_id, workflow_id, target_entity_id, intake_id, status, \
                      fencing_token, lock_ttl_ms, created_at, updated_at, finished_at) \
    SELECT * FROM UNNEST($13::text[], $14::text[], $15::text[], $16::text[], $17::text[], \
                         $18::text[], $19::int8[], $20::int8[], $21::int8[], $22::int8[], \
                         $23::int8[]) \
), expired_runs AS ( \
    UPDATE runs SET status = $24, updated_at = $25, finished_at = $25 \
    WHERE id = ANY($26::text[]) AND status = $27 \
), raw AS ( \
    INSERT INTO raw_deliveries (id, source, content_type, body, received_at) \
    SELECT * FROM UNNEST($28::text[], $29::text[], $30::text[], $31::bytea[], $32::int8[]) \
), cursors AS ( \
    INSERT INTO mailbox_cursors (source, mailbox, uidvalidity, last_uid, updated_at) \
    SELECT * FROM UNNEST($33::text[], $34::text[], $35::int8[], $36::int8[], $37::int8[]) \
    ON CONFLICT (source, mailbox) DO UPDATE SET uidvalidity = excluded.uidvalidity, \
        last_uid = excluded.last_uid, updated_at = excluded.updated_at \
) \
INSERT INTO intake (id, source, delivery_id, outcome, detail, channel, event_type, tenant_id, \
                    target_entity_id, payload, raw_ref, run_id, workflow_id, held_by_run_id, \
                    message_key, config_revision, received_at, decided_at) \
SELECT * FROM UNNEST($38::text[], $39::text[], $40::text[], $41::text[], $42::text[], \
                     $43::text[], $44::text[], $45::text[], $46::text[], $47::text[], \
                     $48::text[], $49::text[], $50::text[], $51::text[], $52::text[], \
                     $53::text[], $54::int8[], $55::int8[])";

/// Writes everything the batch decided (leases, runs, raw bytes, cursors, ledger rows) and
/// returns its answers.
async fn write(
    txn: &mut Transaction<'static, Postgres>,
    decided: Decided,
) -> Result<Vec<Answer>, DbErr> {
    let Decided {
        answers,
        mut ledger,
        mut raw,
        mut cursors,
        locks,
    } = decided;
    let (mut created, mut changed, mut runs) = (locks.created, locks.changed, locks.new_runs);
    let query = sqlx::query(WRITE);
    let query = bind_leases(query, &mut created);
    let query = bind_leases(query, &mut changed);
    query
        .bind(take(&mut runs, |r| std::mem::take(&mut r.id)))
        .bind(take(&mut runs, |r| std::mem::take(&mut r.tenant_id)))
        .bind(take(&mut runs, |r| std::mem::take(&mut r.workflow_id)))
        .bind(take(&mut runs, |r| std::mem::take(&mut r.target_entity_id)))
        .bind(take(&mut runs, |r| std::mem::take(&mut r.intake_id)))
        .bind(take(&mut runs, |r| r.status.as_str()))
        .bind(take(&mut runs, |r| r.fencing_token))
        .bind(take(&mut runs, |r| r.lock_ttl_ms))
        .bind(take(&mut runs, |r| r.created_at))
        .bind(take(&mut runs, |r| r.updated_at))
        .bind(take(&mut runs, |r| r.finished_at))
        .bind(RunStatus::Expired.as_str())
        .bind(locks.now)
        .bind(locks.expired_runs)
        .bind(RunStatus::Queued.as_str())
        .bind(take(&mut raw, |r| std::mem::take(&mut r.id)))
        .bind(take(&mut raw, |r| std::mem::take(&mut r.source)))
        .bind(take(&mut raw, |r| std::mem::take(&mut r.content_type)))
        .bind(take(&mut raw, |r| std::mem::take(&mut r.body)))
        .bind(take(&mut raw, |r| r.received_at))
        .bind(take(&mut cursors, |c| std::mem::take(&mut c.source)))
        .bind(take(&mut cursors, |c| std::mem::take(&mut c.mailbox)))
        .bind(take(&mut cursors, |c| c.uidvalidity))
        .bind(take(&mut cursors, |c| c.last_uid))
        .bind(take(&mut cursors, |c| c.updated_at))
        .bind(take(&mut ledger, |r| std::mem::take(&mut r.id)))
        .bind(take(&mut ledger, |r| std::mem::take(&mut r.source)))
        .bind(take(&mut ledger, |r| std::mem::take(&mut r.delivery_id)))
        .bind(take(&mut ledger, |r| std::mem::take(&mut r.outcome)))
        .bind(take(&mut ledger, |r| r.detail.take()))
        .bind(take(&mut ledger, |r| r.channel.take()))
        .bind(take(&mut ledger, |r| r.event_type.take()))
        .bind(take(&mut ledger, |r| r.tenant_id.take()))
        .bind(take(&mut ledger, |r| r.target_entity_id.take()))
        .bind(take(&mut ledger, |r| r.payload.take()))
        .bind(take(&mut ledger, |r| r.raw_ref.take()))
        .bind(take(&mut ledger, |r| r.run_id.take()))
        .bind(take(&mut ledger, |r| r.workflow_id.take()))
        .bind(take(&mut ledger, |r| r.held_by_run_id.take()))
        .bind(take(&mut ledger, |r| r.message_key.take()))
        .bind(take(&mut ledger, |r| {
            std::mem::take(&mut r.config_revision)
        }))
        .bind(take(&mut ledger, |r| r.received_at))
        .bind(take(&mut ledger, |r| r.decided_at))
        .execute(&mut **txn)
        .await
        .map_err(db_err)?;
    Ok(answers)
}

type Query = sqlx::query::Query<'static, Postgres, sqlx::postgres::PgArguments>;

/// Binds `(tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at)`.
fn bind_leases(query: Query, leases: &mut [entity_lock::Model]) -> Query {
    query
        .bind(take(leases, |l| std::mem::take(&mut l.tenant_id)))
        .bind(take(leases, |l| std::mem::take(&mut l.target_entity_id)))
        .bind(take(leases, |l| l.run_id.take()))
        .bind(take(leases, |l| l.fencing_token))
        .bind(take(leases, |l| l.expires_at))
        .bind(take(leases, |l| l.updated_at))
}

/// One column of `rows`, moved out of them: an array parameter.
fn take<T, U>(rows: &mut [T], column: impl FnMut(&mut T) -> U) -> Vec<U> {
    rows.iter_mut().map(column).collect()
}

/// sqlx's error as sea-orm's, so the pool writer's retry rules apply unchanged: losing the
/// connection is a connection error, anything else a failed query.
fn db_err(error: sqlx::Error) -> DbErr {
    let lost_connection = matches!(
        error,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
    );
    let error = RuntimeErr::SqlxError(Arc::new(error));
    if lost_connection {
        DbErr::Conn(error)
    } else {
        DbErr::Query(error)
    }
}
