//! The config revisions that came into force: written at start and on each reload that
//! changes the file, read by `GET /v1/revisions`, the console and `route --revision`.
//!
//! Invariant: a revision's content never holds a secret (only workflow, trigger, source and
//! target names and settings that route), and at most one row per database is open
//! (`in_force_until IS NULL`) after a [`record`], unless two replicas run different files.

use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr,
    EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};
use serde::{Deserialize, Serialize};
use switchyard_core::Workflow;

use crate::Store;
use crate::entities::config_revision;

/// What a revision said, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RevisionContent {
    pub workflows: Vec<RevisionWorkflow>,
    pub sources: Vec<Part>,
    pub targets: Vec<Part>,
    /// The principals workflows ran as under this revision (none in revisions stored before
    /// principals existed): whose authority a run of this revision acted under.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub principals: Vec<RevisionPrincipal>,
}

/// A principal as a revision defined it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionPrincipal {
    pub id: String,
    pub tenant: String,
    pub kind: String,
    pub status: String,
    /// Unix ms after which it was expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<i64>,
    #[serde(default)]
    pub capabilities: Vec<String>,
}

/// A workflow with its triggers and target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RevisionWorkflow {
    #[serde(flatten)]
    pub workflow: Workflow,
    pub target: String,
    /// The principal it ran as, and what it required of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
}

/// A source or target: its kind, name and (for sources) tenants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<String>,
}

impl RevisionContent {
    /// The workflows in domain form (for a trigger index of this revision).
    pub fn domain_workflows(&self) -> Vec<Workflow> {
        self.workflows.iter().map(|w| w.workflow.clone()).collect()
    }

    /// Only what a caller limited to `sees` tenants may see: their workflows, the targets
    /// those use, and sources of their tenants, each naming only those tenants (a Slack source
    /// shared by several tenants names no other).
    pub fn visible_to(mut self, sees: impl Fn(&str) -> bool) -> Self {
        self.workflows.retain(|w| sees(&w.workflow.tenant_id));
        let used: Vec<String> = self.workflows.iter().map(|w| w.target.clone()).collect();
        self.targets.retain(|t| used.contains(&t.name));
        for source in &mut self.sources {
            source.tenants.retain(|t| sees(t));
        }
        self.sources.retain(|s| !s.tenants.is_empty());
        self.principals.retain(|p| sees(&p.tenant));
        self
    }
}

/// A stored revision, its content parsed.
#[derive(Debug, Clone)]
pub struct Revision {
    pub id: String,
    pub hash: String,
    pub content: RevisionContent,
    pub in_force_from: i64,
    pub in_force_until: Option<i64>,
}

impl Revision {
    fn of(row: config_revision::Model) -> Result<Self, DbErr> {
        let content = serde_json::from_str(&row.content).map_err(|e| {
            DbErr::Custom(format!("config revision {} is not readable: {e}", row.id))
        })?;
        Ok(Self {
            id: row.id,
            hash: row.hash,
            content,
            in_force_from: row.in_force_from,
            in_force_until: row.in_force_until,
        })
    }
}

/// The `flow_gates` row that [`record`]s take turns on.
const REVISIONS_GATE: &str = "config_revisions";

/// Records that the revision `hash` is in force from `now`: closes the open revision and opens
/// this one, unless it is already the one in force (an unchanged reload records nothing).
/// Returns whether a new row was written.
pub async fn record(
    db: &DatabaseConnection,
    hash: &str,
    content: &RevisionContent,
    now: i64,
) -> Result<bool, DbErr> {
    let txn = crate::runs::begin_write(db).await?;
    // Replicas recording at once take turns: locking the open rows serialises nothing when
    // there are none (the first start), and on PostgreSQL a waiter's read misses the row the
    // first one inserted, so both would write.
    crate::ceilings::lock_gate(&txn, REVISIONS_GATE, now).await?;
    let open = config_revision::Entity::find()
        .filter(config_revision::Column::InForceUntil.is_null())
        .order_by_desc(config_revision::Column::Id)
        .lock_exclusive()
        .all(&txn)
        .await?;
    if open.first().is_some_and(|row| row.hash == hash) && open.len() == 1 {
        txn.commit().await?;
        return Ok(false);
    }
    config_revision::Entity::update_many()
        .col_expr(
            config_revision::Column::InForceUntil,
            sea_orm::sea_query::Expr::value(now),
        )
        .filter(config_revision::Column::InForceUntil.is_null())
        .exec(&txn)
        .await?;
    config_revision::ActiveModel {
        id: Set(uuid::Uuid::now_v7().to_string()),
        hash: Set(hash.to_owned()),
        content: Set(serde_json::to_string(content).unwrap_or_default()),
        in_force_from: Set(now),
        in_force_until: Set(None),
    }
    .insert(&txn)
    .await?;
    txn.commit().await?;
    Ok(true)
}

/// Revisions newest first, older than `before` (a revision id).
pub async fn list<C: ConnectionTrait>(
    db: &C,
    before: Option<&str>,
    limit: u64,
) -> Result<Vec<Revision>, DbErr> {
    let mut query = config_revision::Entity::find()
        .order_by_desc(config_revision::Column::Id)
        .limit(limit);
    if let Some(before) = before {
        query = query.filter(config_revision::Column::Id.lt(before));
    }
    query.all(db).await?.into_iter().map(Revision::of).collect()
}

/// One revision by its id, or by its hash (the last time that file came into force).
pub async fn get<C: ConnectionTrait>(db: &C, id_or_hash: &str) -> Result<Option<Revision>, DbErr> {
    if let Some(row) = config_revision::Entity::find_by_id(id_or_hash)
        .one(db)
        .await?
    {
        return Revision::of(row).map(Some);
    }
    by_hash(db, id_or_hash).await
}

/// The last revision with this hash: the content a ledger row's `config_revision` names.
pub async fn by_hash<C: ConnectionTrait>(db: &C, hash: &str) -> Result<Option<Revision>, DbErr> {
    config_revision::Entity::find()
        .filter(config_revision::Column::Hash.eq(hash))
        .order_by_desc(config_revision::Column::Id)
        .one(db)
        .await?
        .map(Revision::of)
        .transpose()
}

impl Store {
    /// Records that the revision `hash` (with `content`) is in force from `now`: one new row
    /// per change of hash, none when it is already the one in force. Whether a row was written.
    pub async fn record_revision(
        &self,
        hash: &str,
        content: &RevisionContent,
        now: i64,
    ) -> Result<bool, DbErr> {
        record(self.db(), hash, content, now).await
    }

    /// Revisions newest first, older than `before` (a revision id), at most `limit`.
    pub async fn revisions(
        &self,
        before: Option<&str>,
        limit: u64,
    ) -> Result<Vec<Revision>, DbErr> {
        list(self.db(), before, limit).await
    }

    /// One revision by its id, or by its hash (the last time that file came into force).
    pub async fn revision(&self, id_or_hash: &str) -> Result<Option<Revision>, DbErr> {
        get(self.db(), id_or_hash).await
    }

    /// The last revision with this hash: the content a ledger row's `config_revision` names.
    pub async fn revision_by_hash(&self, hash: &str) -> Result<Option<Revision>, DbErr> {
        by_hash(self.db(), hash).await
    }
}
