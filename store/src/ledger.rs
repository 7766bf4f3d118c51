//! Reads of the intake ledger and its rows' raw bytes (pages newest first with tenant filters,
//! one row, raw bytes byte for byte, the console's counts), and the writer's duplicate lookup.
//!
//! Invariant: a tenant-limited caller never reads another tenant's row: every read that a
//! caller pages through takes its tenant filter (`None`: every tenant; empty: none).

use std::collections::HashMap;

use sea_orm::sea_query::{DynIden, Expr, IntoIden, Query, SimpleExpr};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, Iterable, QueryFilter,
    QueryOrder, QuerySelect, StatementBuilder,
};

use super::entities::{intake, raw_delivery};
use crate::{Millis, Store};

/// Which ledger rows a listing shows.
#[derive(Debug, Default, Clone, Copy)]
pub struct Filter<'a> {
    /// Only these tenants' rows (`None`: every tenant; empty: none). The caller's tenant
    /// limit and its `tenant` parameter, combined by `Principal::tenant_filter`.
    pub tenants: Option<&'a [String]>,
    pub outcome: Option<&'a str>,
    pub source: Option<&'a str>,
    pub target_entity_id: Option<&'a str>,
    pub delivery_id: Option<&'a str>,
    /// Only rows received at or after this time (epoch ms).
    pub since: Option<i64>,
    /// Only rows received before this time (epoch ms).
    pub until: Option<i64>,
    /// Only rows with a smaller (older) id: the next page's cursor.
    pub before: Option<&'a str>,
}

/// Prefix searches beside a [`Filter`]'s exact matches: the rows whose entity or delivery id
/// starts with these (each read through an index led by its column, as a range).
#[derive(Debug, Default, Clone, Copy)]
pub struct Prefixes<'a> {
    pub target_entity_id: Option<&'a str>,
    pub delivery_id: Option<&'a str>,
}

/// How much earlier than its `received_at` a ledger row's id may have been made, at most.
const ID_SLACK_MS: i64 = 300_000;

/// Ledger rows newest first (ids are UUIDv7, so id order is time order).
pub async fn list<C: ConnectionTrait>(
    db: &C,
    filter: Filter<'_>,
    limit: u64,
) -> Result<Vec<intake::Model>, DbErr> {
    match select(filter, Prefixes::default(), limit) {
        Some(query) => query.all(db).await,
        None => Ok(Vec::new()),
    }
}

/// The statement behind a ledger listing, or `None` when the tenant filter lets nothing
/// through. Public so the query-plan tests can check which index each database reads.
pub fn select(
    filter: Filter<'_>,
    prefixes: Prefixes<'_>,
    limit: u64,
) -> Option<sea_orm::Select<intake::Entity>> {
    let mut query = intake::Entity::find()
        .order_by_desc(intake::Column::Id)
        .limit(limit);
    if let Some(tenants) = filter.tenants {
        if tenants.is_empty() {
            return None;
        }
        query = query.filter(intake::Column::TenantId.is_in(tenants.iter().map(String::as_str)));
    }
    if let Some(prefix) = prefixes.target_entity_id {
        query = query.filter(starting_with(intake::Column::TargetEntityId, prefix));
    }
    if let Some(prefix) = prefixes.delivery_id {
        query = query.filter(starting_with(intake::Column::DeliveryId, prefix));
    }
    if let Some(entity) = filter.target_entity_id {
        query = query.filter(intake::Column::TargetEntityId.eq(entity));
    }
    if let Some(delivery_id) = filter.delivery_id {
        query = query.filter(intake::Column::DeliveryId.eq(delivery_id));
    }
    if let Some(since) = filter.since {
        // Ids are UUIDv7 made around receipt (the caller makes one just before stamping
        // `received_at`; a replay's are later): with [`ID_SLACK_MS`] to spare, the id bound
        // is where a walk of an index ending in `id` (`intake_outcome`) stops, instead of
        // reading every older row of the outcome. `received_at` still decides.
        query = query
            .filter(intake::Column::ReceivedAt.gte(since))
            .filter(intake::Column::Id.gte(crate::cutoff_id(since - ID_SLACK_MS)));
    }
    if let Some(until) = filter.until {
        query = query.filter(intake::Column::ReceivedAt.lt(until));
    }
    if let Some(outcome) = filter.outcome {
        query = query.filter(intake::Column::Outcome.eq(outcome));
    }
    if let Some(source) = filter.source {
        query = query.filter(intake::Column::Source.eq(source));
    }
    if let Some(before) = filter.before {
        query = query.filter(intake::Column::Id.lt(before));
    }
    Some(query)
}

/// `column` starts with `prefix`: a range an index led by the column answers (`>= prefix` and
/// `<` the prefix with its last character stepped up, which holds in code point order: SQLite's
/// `BINARY`, PostgreSQL's `C` collations, MySQL's ordering of ASCII ids), plus a `LIKE` with
/// `%` and `_` escaped so no row outside the prefix comes back under any collation.
fn starting_with(column: intake::Column, prefix: &str) -> sea_orm::Condition {
    use sea_orm::ExprTrait;
    use sea_orm::sea_query::{Expr, LikeExpr};
    let mut escaped = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '%' | '_' | '!') {
            escaped.push('!');
        }
        escaped.push(c);
    }
    escaped.push('%');
    let mut condition = sea_orm::Condition::all()
        .add(column.gte(prefix))
        .add(Expr::col((intake::Entity, column)).like(LikeExpr::new(escaped).escape('!')));
    if let Some(upper) = successor(prefix) {
        condition = condition.add(column.lt(upper));
    }
    condition
}

/// The least string greater than every string that starts with `prefix` (its last character
/// stepped up; `None` if there is none).
fn successor(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let mut next = last as u32 + 1;
        if (0xD800..0xE000).contains(&next) {
            next = 0xE000;
        }
        if let Some(next) = char::from_u32(next) {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// One bar of a ledger chart: how many rows of `key` (a workflow, a source, or `None` for
/// the whole ledger) had `outcome` in the bucket starting at `bucket` (epoch ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    pub key: Option<String>,
    pub bucket: i64,
    pub outcome: String,
    pub count: i64,
}

/// What a chart is split by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartBy {
    /// The whole ledger: one series per outcome.
    Ledger,
    Workflow,
    Source,
}

/// Ledger rows received in `[since, until)` of `tenants`, counted per (key, bucket of
/// `bucket_ms`, outcome): the console's charts. Read through the primary key's time order
/// (ids are UUIDv7: `id >= cutoff_id(since)`), not a scan of the table.
pub async fn chart<C: ConnectionTrait>(
    db: &C,
    tenants: Option<&[String]>,
    by: ChartBy,
    since: Millis,
    until: Millis,
    bucket_ms: i64,
) -> Result<Vec<Bucket>, DbErr> {
    use sea_orm::sea_query::Expr;
    if tenants.is_some_and(<[String]>::is_empty) || bucket_ms <= 0 || until <= since {
        return Ok(Vec::new());
    }
    // The bucket's start, in integer arithmetic every database does the same. The two numbers
    // are written into the statement (they are integers), so the select and the group by are
    // one expression to PostgreSQL, not two with different parameters.
    let bucket = || {
        Expr::cust(format!(
            "received_at - ((received_at - {since}) % {bucket_ms})"
        ))
    };
    let series = match by {
        ChartBy::Ledger => intake::Column::Outcome,
        ChartBy::Workflow => intake::Column::WorkflowId,
        ChartBy::Source => intake::Column::Source,
    };
    let mut query = intake::Entity::find()
        .select_only()
        .expr_as(bucket(), "bucket")
        .column(intake::Column::Outcome)
        .column_as(intake::Column::Id.count(), "n")
        .column_as(series, "series")
        .filter(intake::Column::Id.gte(crate::cutoff_id(since)))
        .filter(intake::Column::ReceivedAt.gte(since))
        .filter(intake::Column::ReceivedAt.lt(until))
        .group_by(bucket())
        .group_by(intake::Column::Outcome);
    if by != ChartBy::Ledger {
        query = query.group_by(series);
    }
    if let Some(tenants) = tenants {
        query = query.filter(intake::Column::TenantId.is_in(tenants.iter().map(String::as_str)));
    }
    let rows: Vec<(i64, String, i64, Option<String>)> = query.into_tuple().all(db).await?;
    Ok(rows
        .into_iter()
        .map(|(bucket, outcome, count, key)| Bucket {
            key: key.filter(|_| by != ChartBy::Ledger),
            bucket,
            outcome,
            count,
        })
        .collect())
}

/// The ledger row of each `(source, scope, delivery_id)` already recorded (rows of the same
/// id in other scopes come back too, under their own keys).
pub async fn existing_deliveries<C: ConnectionTrait>(
    db: &C,
    keys: &[(&str, &str, &str)],
) -> Result<HashMap<(String, String, String), intake::Model>, DbErr> {
    let pairs: Vec<(&str, &str)> = keys.iter().map(|&(source, _, id)| (source, id)).collect();
    let rows = rows_matching(db, intake::Column::DeliveryId, &pairs).await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let key = (
                row.source.clone(),
                row.scope.clone(),
                row.delivery_id.clone(),
            );
            (key, row)
        })
        .collect())
}

/// The routed ledger row that claimed each `(source, message_key)`.
pub async fn claimed_messages<C: ConnectionTrait>(
    db: &C,
    keys: &[(&str, &str)],
) -> Result<HashMap<(String, String), intake::Model>, DbErr> {
    let rows = rows_matching(db, intake::Column::MessageKey, keys).await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| Some(((row.source.clone(), row.message_key.clone()?), row)))
        .collect())
}

/// Ledger rows whose `(source, column)` is one of `keys`: one `source = ? AND column IN (...)`
/// per source, which every database answers with index probes. (A chain of `OR`ed pairs can
/// make PostgreSQL scan the whole source until the table has statistics.)
async fn rows_matching<C: ConnectionTrait>(
    db: &C,
    column: intake::Column,
    keys: &[(&str, &str)],
) -> Result<Vec<intake::Model>, DbErr> {
    let mut rows = Vec::new();
    for (source, values) in group_by_first(keys) {
        for chunk in values.chunks(500) {
            rows.extend(
                intake::Entity::find()
                    .filter(intake::Column::Source.eq(source))
                    .filter(column.is_in(chunk.iter().copied()))
                    .all(db)
                    .await?,
            );
        }
    }
    Ok(rows)
}

/// `(a, b)` pairs grouped by `a`, each group's `b`s deduplicated, in a stable order.
fn group_by_first<'a>(
    pairs: &[(&'a str, &'a str)],
) -> std::collections::BTreeMap<&'a str, Vec<&'a str>> {
    let mut groups: std::collections::BTreeMap<&str, Vec<&str>> = std::collections::BTreeMap::new();
    for (first, second) in pairs {
        let group = groups.entry(first).or_default();
        if !group.contains(second) {
            group.push(second);
        }
    }
    groups
}

/// One stored original delivery.
pub async fn raw<C: ConnectionTrait>(
    db: &C,
    id: &str,
) -> Result<Option<raw_delivery::Model>, DbErr> {
    raw_delivery::Entity::find_by_id(id)
        .filter(raw_delivery::stored())
        .one(db)
        .await
}

/// Inserts `ledger` rows with their raw bytes in one multi-row `INSERT`: the entity's columns,
/// then `raw_content_type` and `raw_body` (which the entity leaves out; `NULL` for a row without
/// bytes). For the writers that go through sea-orm (MySQL's batches, a wait's resume); SQLite's
/// and PostgreSQL's batches name the two columns in their own statements. `raw` is in the
/// ledger's order ([`crate::intake::raw_by_row`]): bytes naming no row are refused.
pub(crate) async fn insert_with_raw<C: ConnectionTrait>(
    db: &C,
    ledger: Vec<intake::Model>,
    raw: Vec<raw_delivery::Model>,
) -> Result<(), DbErr> {
    let raw = crate::intake::raw_by_row(&ledger, raw, |bytes| &bytes.id).map_err(DbErr::Custom)?;
    if ledger.is_empty() {
        return Ok(());
    }
    let columns: Vec<DynIden> = intake::Column::iter()
        .map(IntoIden::into_iden)
        .chain([
            raw_delivery::Column::ContentType.into_iden(),
            raw_delivery::Column::Body.into_iden(),
        ])
        .collect();
    let mut insert = Query::insert();
    insert.into_table(intake::Entity).columns(columns);
    for (row, bytes) in ledger.into_iter().zip(raw) {
        let row = intake::ActiveModel::from(row);
        let mut values = intake::Column::iter()
            .map(|column| {
                row.get(column)
                    .into_value()
                    .map(SimpleExpr::from)
                    .ok_or_else(|| DbErr::Custom(format!("ledger column {column:?} unset")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (content_type, body) = bytes.map(|b| (b.content_type, b.body)).unzip();
        values.push(Expr::value(content_type));
        values.push(Expr::value(body));
        insert
            .values(values)
            .map_err(|error| DbErr::Custom(error.to_string()))?;
    }
    db.execute_raw(StatementBuilder::build(&insert, &db.get_database_backend()))
        .await?;
    Ok(())
}

/// One ledger row, if the caller may see its tenant (`tenants` as in [`Filter`]).
pub async fn get<C: ConnectionTrait>(
    db: &C,
    id: &str,
    tenants: Option<&[String]>,
) -> Result<Option<intake::Model>, DbErr> {
    let row = intake::Entity::find_by_id(id).one(db).await?;
    Ok(row.filter(|row| visible(tenants, row.tenant_id.as_deref())))
}

/// Whether a row of `tenant` passes a tenant filter; rows without a tenant only pass `None`.
pub fn visible(tenants: Option<&[String]>, tenant: Option<&str>) -> bool {
    match (tenants, tenant) {
        (None, _) => true,
        (Some(tenants), Some(tenant)) => tenants.iter().any(|t| t == tenant),
        (Some(_), None) => false,
    }
}

/// Ledger rows decided at or after `since`, counted per (workflow, outcome), of the tenants a
/// caller sees: the console's "last 24 hours" per workflow.
pub async fn outcome_counts<C: ConnectionTrait>(
    db: &C,
    tenants: Option<&[String]>,
    since: i64,
) -> Result<Vec<(Option<String>, String, i64)>, DbErr> {
    if tenants.is_some_and(<[String]>::is_empty) {
        return Ok(Vec::new());
    }
    let mut query = intake::Entity::find()
        .select_only()
        .column(intake::Column::WorkflowId)
        .column(intake::Column::Outcome)
        .column_as(intake::Column::Id.count(), "n")
        .filter(intake::Column::DecidedAt.gte(since))
        .group_by(intake::Column::WorkflowId)
        .group_by(intake::Column::Outcome);
    if let Some(tenants) = tenants {
        query = query.filter(intake::Column::TenantId.is_in(tenants.iter().map(String::as_str)));
    }
    query
        .into_tuple::<(Option<String>, String, i64)>()
        .all(db)
        .await
}

/// Runs created since `since` (Unix ms), by workflow and status, of `tenants` (`None`: every
/// tenant): how each workflow's runs ended (a `superseded` run is not a failure), for the
/// console. Bounded by the UUIDv7 primary key, not a scan.
pub async fn run_status_counts<C: ConnectionTrait>(
    db: &C,
    tenants: Option<&[String]>,
    since: i64,
) -> Result<Vec<(String, String, i64)>, DbErr> {
    use crate::entities::run;
    if tenants.is_some_and(<[String]>::is_empty) {
        return Ok(Vec::new());
    }
    let mut query = run::Entity::find()
        .select_only()
        .column(run::Column::WorkflowId)
        .column(run::Column::Status)
        .column_as(run::Column::Id.count(), "n")
        .filter(run::Column::Id.gte(crate::cutoff_id(since)))
        .group_by(run::Column::WorkflowId)
        .group_by(run::Column::Status);
    if let Some(tenants) = tenants {
        query = query.filter(run::Column::TenantId.is_in(tenants.iter().map(String::as_str)));
    }
    query.into_tuple::<(String, String, i64)>().all(db).await
}

impl Store {
    /// Ledger rows newest first, as `filter` says (at most `limit`).
    pub async fn ledger_page(
        &self,
        filter: Filter<'_>,
        limit: u64,
    ) -> Result<Vec<intake::Model>, DbErr> {
        list(self.db(), filter, limit).await
    }

    /// Ledger rows newest first, as `filter` and `prefixes` say (at most `limit`).
    pub async fn ledger_search(
        &self,
        filter: Filter<'_>,
        prefixes: Prefixes<'_>,
        limit: u64,
    ) -> Result<Vec<intake::Model>, DbErr> {
        match select(filter, prefixes, limit) {
            Some(query) => query.all(self.db()).await,
            None => Ok(Vec::new()),
        }
    }

    /// Ledger rows received in `[since, until)` counted per (key, bucket, outcome): see
    /// [`chart`].
    pub async fn ledger_chart(
        &self,
        tenants: Option<&[String]>,
        by: ChartBy,
        since: Millis,
        until: Millis,
        bucket_ms: i64,
    ) -> Result<Vec<Bucket>, DbErr> {
        chart(self.db(), tenants, by, since, until, bucket_ms).await
    }

    /// The row with the greatest delivery id recorded under `source` in the empty scope. A
    /// schedule's delivery ids are its fires' instants in RFC 3339 UTC, which sort as the
    /// instants do: this is its latest recorded fire, whichever replica recorded it.
    pub async fn latest_delivery(&self, source: &str) -> Result<Option<intake::Model>, DbErr> {
        intake::Entity::find()
            .filter(intake::Column::Source.eq(source))
            .filter(intake::Column::Scope.eq(""))
            .order_by_desc(intake::Column::DeliveryId)
            .limit(1)
            .one(self.db())
            .await
    }

    /// One ledger row, if its tenant is one of `tenants` (`None`: every row).
    pub async fn ledger_row(
        &self,
        id: &str,
        tenants: Option<&[String]>,
    ) -> Result<Option<intake::Model>, DbErr> {
        get(self.db(), id, tenants).await
    }

    /// The ledger rows with these ids (any tenant: for what the store itself refers to, such
    /// as a run's own delivery), in no particular order.
    pub async fn ledger_rows(&self, ids: &[&str]) -> Result<Vec<intake::Model>, DbErr> {
        let mut rows = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(200) {
            rows.extend(
                intake::Entity::find()
                    .filter(intake::Column::Id.is_in(chunk.iter().copied()))
                    .all(self.db())
                    .await?,
            );
        }
        Ok(rows)
    }

    /// The original bytes of the delivery `id` (its ledger row's id), as received.
    pub async fn raw_delivery(&self, id: &str) -> Result<Option<raw_delivery::Model>, DbErr> {
        raw(self.db(), id).await
    }

    /// The original bytes of each of `ids` that are stored, by id.
    pub async fn raw_deliveries(
        &self,
        ids: &[&str],
    ) -> Result<HashMap<String, raw_delivery::Model>, DbErr> {
        let mut raws = HashMap::new();
        for chunk in ids.chunks(200) {
            for raw in raw_delivery::Entity::find()
                .filter(raw_delivery::Column::Id.is_in(chunk.iter().copied()))
                .filter(raw_delivery::stored())
                .all(self.db())
                .await?
            {
                raws.insert(raw.id.clone(), raw);
            }
        }
        Ok(raws)
    }

    /// Whether the ledger row `id` is kept and names `raw:<id>`: its bytes existed and
    /// retention deleted them (a `410`, not a `404`).
    pub async fn raw_was_pruned(&self, id: &str) -> Result<bool, DbErr> {
        Ok(intake::Entity::find_by_id(id)
            .filter(intake::Column::RawRef.eq(format!("raw:{id}")))
            .select_only()
            .column(intake::Column::Id)
            .into_tuple::<String>()
            .one(self.db())
            .await?
            .is_some())
    }

    /// The routed ledger row that claimed each `(source, message_key)`.
    pub async fn message_claims(
        &self,
        keys: &[(&str, &str)],
    ) -> Result<HashMap<(String, String), intake::Model>, DbErr> {
        claimed_messages(self.db(), keys).await
    }

    /// Ledger rows decided at or after `since`, counted per (workflow, outcome), of `tenants`.
    pub async fn outcome_counts(
        &self,
        tenants: Option<&[String]>,
        since: Millis,
    ) -> Result<Vec<(Option<String>, String, i64)>, DbErr> {
        outcome_counts(self.db(), tenants, since).await
    }

    /// Runs created since `since`, counted per (workflow, status), of `tenants`.
    pub async fn run_status_counts(
        &self,
        tenants: Option<&[String]>,
        since: Millis,
    ) -> Result<Vec<(String, String, i64)>, DbErr> {
        run_status_counts(self.db(), tenants, since).await
    }

    /// `(intake id, shadow verdicts as stored)` of the ledger rows received at or after
    /// `since` that carry shadow verdicts, of `tenants`: a primary key range, not a scan.
    pub async fn shadow_verdicts(
        &self,
        tenants: Option<&[String]>,
        since: Millis,
    ) -> Result<Vec<(String, Option<String>)>, DbErr> {
        if tenants.is_some_and(<[String]>::is_empty) {
            return Ok(Vec::new());
        }
        let mut query = intake::Entity::find()
            .select_only()
            .column(intake::Column::Id)
            .column(intake::Column::Shadow)
            .filter(intake::Column::Id.gte(crate::cutoff_id(since)))
            .filter(intake::Column::ReceivedAt.gte(since))
            .filter(intake::Column::Shadow.is_not_null());
        if let Some(tenants) = tenants {
            query =
                query.filter(intake::Column::TenantId.is_in(tenants.iter().map(String::as_str)));
        }
        query.into_tuple().all(self.db()).await
    }
}
