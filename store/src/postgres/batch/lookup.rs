//! The lookup statement: everything a batch needs to know (gates, stored answers, leases) in
//! one round trip, row-locking what the batch will change.

use std::collections::{BTreeSet, HashMap};

use sea_orm::DbErr;
use sea_orm::sqlx::postgres::PgRow;
use sea_orm::sqlx::{self, PgConnection, Row};

use crate::entities::entity_lock;
use crate::intake::pool::db_err;
use crate::intake::{Found, Keys, MessageKey, StoredAnswer};

/// Everything a batch needs to know, in one round trip: the flow-control gates it names
/// (`gate`, row-locked, first and in name order: every writer locks gates before leases), the
/// stored answer of each `(source, scope, delivery_id)` (`delivery` rows), of the routed row that
/// claimed each `(source, message_key)` (`message`), and the lease row of each `(tenant_id,
/// target_entity_id)` that has one (`lease`), row-locked until the commit.
pub const LOOK_UP: &str = "\
WITH gates AS ( \
    SELECT g.name, g.tat_us FROM UNNEST($7::text[]) AS k(name) \
    CROSS JOIN LATERAL ( \
        SELECT name, tat_us FROM flow_gates WHERE name = k.name LIMIT 1 FOR UPDATE \
    ) AS g \
), leases AS ( \
    SELECT l.* \
    FROM UNNEST($5::text[], $6::text[]) AS k(tenant_id, target_entity_id) \
    CROSS JOIN LATERAL ( \
        SELECT tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at \
        FROM entity_locks \
        WHERE target_entity_id = k.target_entity_id AND tenant_id = k.tenant_id \
        LIMIT 1 FOR UPDATE \
    ) AS l \
) \
SELECT 'gate', name::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, \
       NULL::text, NULL::text, tat_us, NULL::int8, NULL::int8, NULL::text \
FROM gates \
UNION ALL \
SELECT 'delivery', k.source, k.key, i.id, i.outcome, i.detail, i.run_id, i.workflow_id, \
       i.held_by_run_id, NULL::int8, NULL::int8, NULL::int8, k.scope \
FROM UNNEST($1::text[], $2::text[], $8::text[]) AS k(source, key, scope) \
CROSS JOIN LATERAL ( \
    SELECT id, outcome, detail, run_id, workflow_id, held_by_run_id FROM intake \
    WHERE delivery_id = k.key AND source = k.source AND scope = k.scope LIMIT 1 \
) AS i \
UNION ALL \
SELECT 'message', k.source, k.key, i.id, i.outcome, i.detail, i.run_id, i.workflow_id, \
       i.held_by_run_id, NULL, NULL, NULL, NULL \
FROM UNNEST($3::text[], $4::text[]) AS k(source, key) \
CROSS JOIN LATERAL ( \
    SELECT id, outcome, detail, run_id, workflow_id, held_by_run_id FROM intake \
    WHERE message_key = k.key AND source = k.source LIMIT 1 \
) AS i \
UNION ALL \
SELECT 'lease', tenant_id, target_entity_id, NULL, NULL, NULL, run_id, NULL, NULL, \
       fencing_token, expires_at, updated_at, NULL \
FROM leases";

/// Runs [`LOOK_UP`] for a batch's [`Keys`]. Lease keys go in sorted, so two replicas lock
/// shared rows in the same order.
pub(super) async fn look_up(conn: &mut PgConnection, lookups: &Keys<'_>) -> Result<Found, DbErr> {
    let mut delivery_sources = Vec::with_capacity(lookups.deliveries.len());
    let mut delivery_scopes = Vec::with_capacity(lookups.deliveries.len());
    let mut delivery_ids = Vec::with_capacity(lookups.deliveries.len());
    for &(source, scope, id) in &lookups.deliveries {
        delivery_sources.push(source);
        delivery_scopes.push(scope);
        delivery_ids.push(id);
    }
    let (message_sources, message_keys): (Vec<&str>, Vec<&str>) =
        lookups.messages.iter().copied().unzip();
    let (tenants, entities): (Vec<&str>, Vec<&str>) = lookups
        .leases
        .iter()
        .map(|(tenant, entity)| (tenant.as_str(), entity.as_str()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .unzip();
    let rows = sqlx::query(LOOK_UP)
        .bind(delivery_sources)
        .bind(delivery_ids)
        .bind(message_sources)
        .bind(message_keys)
        .bind(tenants)
        .bind(entities)
        .bind(&lookups.flow.gates)
        .bind(delivery_scopes)
        .fetch_all(&mut *conn)
        .await
        .map_err(db_err)?;
    let mut found = Found {
        seen: HashMap::new(),
        claimed: HashMap::new(),
        leases: Vec::new(),
        flow: Default::default(),
    };
    for row in rows {
        found_row(&mut found, &row).map_err(db_err)?;
    }
    Ok(found)
}

/// Adds one row of [`LOOK_UP`] to what was found.
fn found_row(found: &mut Found, row: &PgRow) -> Result<(), sqlx::Error> {
    let kind: &str = row.try_get(0)?;
    if kind == "gate" {
        found.flow.tats.insert(row.try_get(1)?, row.try_get(9)?);
        return Ok(());
    }
    let key: MessageKey = (row.try_get(1)?, row.try_get(2)?);
    if kind == "lease" {
        let (tenant_id, target_entity_id) = key;
        found.leases.push(entity_lock::Model {
            tenant_id,
            target_entity_id,
            run_id: row.try_get(6)?,
            fencing_token: row.try_get(9)?,
            expires_at: row.try_get(10)?,
            updated_at: row.try_get(11)?,
        });
        return Ok(());
    }
    let answer = StoredAnswer {
        intake_id: row.try_get(3)?,
        outcome: row.try_get(4)?,
        detail: row.try_get(5)?,
        run_id: row.try_get(6)?,
        workflow_id: row.try_get(7)?,
        held_by_run_id: row.try_get(8)?,
    };
    if kind == "message" {
        found.claimed.insert(key, answer);
    } else {
        let (source, id) = key;
        found.seen.insert((source, row.try_get(12)?, id), answer);
    }
    Ok(())
}
