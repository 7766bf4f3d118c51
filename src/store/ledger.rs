//! Reads of the intake ledger and raw deliveries, and the writer's duplicate lookup.

use std::collections::HashMap;

use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
};

use super::entities::{intake, raw_delivery};

/// Ledger rows newest first (ids are UUIDv7, so id order is time order).
pub async fn list<C: ConnectionTrait>(
    db: &C,
    tenant_id: Option<&str>,
    outcome: Option<&str>,
    source: Option<&str>,
    limit: u64,
) -> Result<Vec<intake::Model>, DbErr> {
    let mut query = intake::Entity::find()
        .order_by_desc(intake::Column::Id)
        .limit(limit);
    if let Some(tenant_id) = tenant_id {
        query = query.filter(intake::Column::TenantId.eq(tenant_id));
    }
    if let Some(outcome) = outcome {
        query = query.filter(intake::Column::Outcome.eq(outcome));
    }
    if let Some(source) = source {
        query = query.filter(intake::Column::Source.eq(source));
    }
    query.all(db).await
}

/// The first ledger row of each `(source, delivery_id)` already recorded.
pub async fn existing_deliveries<C: ConnectionTrait>(
    db: &C,
    keys: &[(&str, &str)],
) -> Result<HashMap<(String, String), intake::Model>, DbErr> {
    let mut found = HashMap::new();
    for chunk in keys.chunks(200) {
        let mut any = Condition::any();
        for (source, delivery_id) in chunk {
            any = any.add(
                Condition::all()
                    .add(intake::Column::Source.eq(*source))
                    .add(intake::Column::DeliveryId.eq(*delivery_id)),
            );
        }
        for row in intake::Entity::find().filter(any).all(db).await? {
            found.insert((row.source.clone(), row.delivery_id.clone()), row);
        }
    }
    Ok(found)
}

/// The routed ledger row that claimed each `(source, message_key)`.
pub async fn claimed_messages<C: ConnectionTrait>(
    db: &C,
    keys: &[(&str, &str)],
) -> Result<HashMap<(String, String), intake::Model>, DbErr> {
    let mut found = HashMap::new();
    for chunk in keys.chunks(200) {
        let mut any = Condition::any();
        for (source, message_key) in chunk {
            any = any.add(
                Condition::all()
                    .add(intake::Column::Source.eq(*source))
                    .add(intake::Column::MessageKey.eq(*message_key)),
            );
        }
        for row in intake::Entity::find().filter(any).all(db).await? {
            if let Some(key) = row.message_key.clone() {
                found.insert((row.source.clone(), key), row);
            }
        }
    }
    Ok(found)
}

/// One stored original delivery.
pub async fn raw<C: ConnectionTrait>(
    db: &C,
    id: &str,
) -> Result<Option<raw_delivery::Model>, DbErr> {
    raw_delivery::Entity::find_by_id(id).one(db).await
}
