//! The write statements: every write of a batch in one statement, and the rare expiry of runs
//! whose lease was taken over.

use sea_orm::DbErr;
use sea_orm::sqlx::{self, PgConnection, Postgres};

use super::simple;
use crate::entities::entity_lock;
use crate::entities::run::RunStatus;
use crate::intake::Writes;
use crate::intake::flow::FlowWrites;
use crate::intake::pool::db_err;
use crate::{ACTIVE, Millis};

/// Every write of a batch but the expiry of runs, in one statement; each `WITH` clause is a
/// no-op for empty arrays. A lease created meanwhile by another replica makes `created` fail
/// and the batch retry; the `changed` rows are row-locked by [`LOOK_UP`].
///
/// Flow control's writes (`gates`, `members`, `due`) update rows [`LOOK_UP`] and
/// [`flow_store::counts_and_windows`] locked: each is found by one probe of its primary key
/// and updated by `ctid` (a TID scan), as `= ANY(..)` got generic plans that scanned the
/// table (and, with `status = 'pending'` added, every pending dispatch on `dispatches_due`).
/// A dispatch's due time is written only for an open window, still pending and unclaimed
/// under its row lock.
///
/// [`LOOK_UP`]: super::lookup::LOOK_UP
/// [`flow_store::counts_and_windows`]: crate::postgres::flow::counts_and_windows
const WRITE: &str = "\
WITH created AS ( \
    INSERT INTO entity_locks \
        (tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at) \
    SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int8[], $5::int8[], \
                         $6::int8[]) \
), changed AS ( \
    INSERT INTO entity_locks \
        (tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at) \
    SELECT * FROM UNNEST($7::text[], $8::text[], $9::text[], $10::int8[], $11::int8[], \
                         $12::int8[]) \
    ON CONFLICT (target_entity_id, tenant_id) DO UPDATE SET run_id = excluded.run_id, \
        fencing_token = excluded.fencing_token, expires_at = excluded.expires_at, \
        updated_at = excluded.updated_at \
), new_runs AS ( \
    INSERT INTO runs (id, tenant_id, workflow_id, target_entity_id, intake_id, status, \
                      fencing_token, lock_ttl_ms, created_at, updated_at, finished_at, \
                      traceparent, tracestate, config_revision, principal_id, deadline_at, \
                      budgets) \
    SELECT * FROM UNNEST($13::text[], $14::text[], $15::text[], $16::text[], $17::text[], \
                         $18::text[], $19::int8[], $20::int8[], $21::int8[], $22::int8[], \
                         $23::int8[], $66::text[], $67::text[], $70::text[], $71::text[], \
                         $72::int8[], $73::text[]) \
), cursors AS ( \
    INSERT INTO mailbox_cursors (source, mailbox, uidvalidity, last_uid, updated_at) \
    SELECT * FROM UNNEST($26::text[], $27::text[], $28::int8[], $29::int8[], $30::int8[]) \
    ON CONFLICT (source, mailbox) DO UPDATE SET uidvalidity = excluded.uidvalidity, \
        last_uid = excluded.last_uid, updated_at = excluded.updated_at \
), outbox AS ( \
    INSERT INTO dispatches (id, run_id, tenant_id, workflow_id, target, status, attempts, \
                            series, due_at, created_at, updated_at, claimed_by) \
    SELECT * FROM UNNEST($49::text[], $50::text[], $51::text[], $52::text[], $53::text[], \
                         $54::text[], $55::int4[], $56::int4[], $57::int8[], $58::int8[], \
                         $59::int8[], $83::text[]) \
), history AS ( \
    INSERT INTO run_history (id, run_id, status, cause, detail, at) \
    SELECT * FROM UNNEST($60::text[], $61::text[], $62::text[], $63::text[], $64::text[], \
                         $65::int8[]) \
), gates AS ( \
    UPDATE flow_gates SET tat_us = k.tat_us, updated_at = $74 \
    FROM UNNEST($75::text[], $76::int8[]) AS k(name, tat_us) \
    CROSS JOIN LATERAL (SELECT ctid AS row FROM flow_gates WHERE name = k.name LIMIT 1) AS g \
    WHERE flow_gates.ctid = g.row \
), members AS ( \
    INSERT INTO run_members (run_id, intake_id, version, joined_at) \
    SELECT * FROM UNNEST($77::text[], $78::text[], $79::text[], $80::int8[]) \
), due AS ( \
    UPDATE dispatches SET due_at = k.due_at, updated_at = $74 \
    FROM UNNEST($81::text[], $82::int8[]) AS k(id, due_at) \
    CROSS JOIN LATERAL (SELECT ctid AS row FROM dispatches WHERE id = k.id LIMIT 1) AS d \
    WHERE dispatches.ctid = d.row \
) \
INSERT INTO intake (id, source, delivery_id, outcome, detail, channel, event_type, tenant_id, \
                    target_entity_id, payload, raw_ref, run_id, workflow_id, held_by_run_id, \
                    message_key, config_revision, received_at, decided_at, traceparent, \
                    tracestate, scope, raw_content_type, raw_body) \
SELECT * FROM UNNEST($31::text[], $32::text[], $33::text[], $34::text[], $35::text[], \
                     $36::text[], $37::text[], $38::text[], $39::text[], $40::text[], \
                     $41::text[], $42::text[], $43::text[], $44::text[], $45::text[], \
                     $46::text[], $47::int8[], $48::int8[], $68::text[], $69::text[], \
                     $84::text[], $24::text[], $25::bytea[])";

/// Active runs whose expired lease another run took over (and their pending dispatches), found
/// by key alone with the status checked in `SET` (`switchyard_store::by_key`). Rare, so also
/// planned with its values each time ([`CUSTOM_PLANS`]).
const CUSTOM_PLANS: &str = "SET LOCAL plan_cache_mode = force_custom_plan";
const EXPIRE_RUNS: &str = "\
    WITH cancelled AS ( \
        UPDATE dispatches SET \
            status = CASE WHEN status = 'pending' THEN 'cancelled' ELSE status END, \
            reason = CASE WHEN status = 'pending' THEN 'lease_expired' ELSE reason END, \
            claim_token = CASE WHEN status = 'pending' THEN NULL ELSE claim_token END, \
            updated_at = CASE WHEN status = 'pending' THEN $2 ELSE updated_at END \
        WHERE run_id = ANY($3::text[]) \
    ) \
    UPDATE runs SET \
        status = CASE WHEN status = ANY($4::text[]) THEN $1 ELSE status END, \
        updated_at = CASE WHEN status = ANY($4::text[]) THEN $2 ELSE updated_at END, \
        finished_at = CASE WHEN status = ANY($4::text[]) THEN $2 ELSE finished_at END \
    WHERE id = ANY($3::text[])";

/// Writes everything the batch decided (leases, runs, cursors, ledger rows with their raw bytes,
/// flow control's rows).
pub(super) async fn write(
    conn: &mut PgConnection,
    decided: Writes,
    flow: FlowWrites,
    now: Millis,
) -> Result<(), DbErr> {
    let Writes {
        mut ledger,
        raw,
        mut cursors,
        locks,
        mut dispatches,
        mut history,
        flow: _,
    } = decided;
    let FlowWrites {
        mut tats,
        mut members,
        mut due,
        ..
    } = flow;
    let annotations = crate::intake::annotate::of(&ledger);
    // Each ledger row's raw bytes, written into the row.
    let mut raw =
        crate::intake::raw_by_row(&ledger, raw, |bytes| &bytes.id).map_err(DbErr::Custom)?;
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
        .bind(take(&mut raw, |r| {
            r.as_mut().map(|r| std::mem::take(&mut r.content_type))
        }))
        .bind(take(&mut raw, |r| {
            r.as_mut().map(|r| std::mem::take(&mut r.body))
        }))
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
        .bind(take(&mut dispatches, |d| std::mem::take(&mut d.id)))
        .bind(take(&mut dispatches, |d| std::mem::take(&mut d.run_id)))
        .bind(take(&mut dispatches, |d| std::mem::take(&mut d.tenant_id)))
        .bind(take(&mut dispatches, |d| {
            std::mem::take(&mut d.workflow_id)
        }))
        .bind(take(&mut dispatches, |d| std::mem::take(&mut d.target)))
        .bind(take(&mut dispatches, |d| d.status.as_str()))
        .bind(take(&mut dispatches, |d| d.attempts))
        .bind(take(&mut dispatches, |d| d.series))
        .bind(take(&mut dispatches, |d| d.due_at))
        .bind(take(&mut dispatches, |d| d.created_at))
        .bind(take(&mut dispatches, |d| d.updated_at))
        .bind(take(&mut history, |h| std::mem::take(&mut h.id)))
        .bind(take(&mut history, |h| std::mem::take(&mut h.run_id)))
        .bind(take(&mut history, |h| h.status.as_str()))
        .bind(take(&mut history, |h| std::mem::take(&mut h.cause)))
        .bind(take(&mut history, |h| h.detail.take()))
        .bind(take(&mut history, |h| h.at))
        .bind(take(&mut runs, |r| r.traceparent.take()))
        .bind(take(&mut runs, |r| r.tracestate.take()))
        .bind(take(&mut ledger, |r| r.traceparent.take()))
        .bind(take(&mut ledger, |r| r.tracestate.take()))
        .bind(take(&mut runs, |r| r.config_revision.take()))
        .bind(take(&mut runs, |r| r.principal_id.take()))
        .bind(take(&mut runs, |r| r.deadline_at))
        .bind(take(&mut runs, |r| r.budgets.take()))
        .bind(now)
        .bind(take(&mut tats, |(gate, _)| std::mem::take(gate)))
        .bind(take(&mut tats, |(_, tat)| *tat))
        .bind(take(&mut members, |m| std::mem::take(&mut m.run_id)))
        .bind(take(&mut members, |m| std::mem::take(&mut m.intake_id)))
        .bind(take(&mut members, |m| m.version.take()))
        .bind(take(&mut members, |m| m.joined_at))
        .bind(take(&mut due, |(id, _)| std::mem::take(id)))
        .bind(take(&mut due, |(_, at)| *at))
        .bind(take(&mut dispatches, |d| d.claimed_by.take()))
        .bind(take(&mut ledger, |r| std::mem::take(&mut r.scope)))
        .execute(&mut *conn)
        .await
        .map_err(db_err)?;
    for annotation in annotations {
        sqlx::query(crate::intake::annotate::POSTGRES)
            .bind(annotation.shadow)
            .bind(annotation.replay_id)
            .bind(annotation.replay_of)
            .bind(annotation.id)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    if !locks.expired_runs.is_empty() {
        simple(conn, CUSTOM_PLANS).await?;
        sqlx::query(EXPIRE_RUNS)
            .bind(RunStatus::Expired.as_str())
            .bind(locks.now)
            .bind(locks.expired_runs)
            .bind(&ACTIVE[..])
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    Ok(())
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
