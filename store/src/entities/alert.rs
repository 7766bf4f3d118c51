//! One alert per `(rule, scope)`: its state (`firing` or `resolved`), the episode it is in,
//! what it says and the numbers behind it, acknowledgement and silence.

use sea_orm::entity::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "alerts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// The `[[alert]]` rule's name (or a built-in rule's).
    pub rule: String,
    /// What the rule is about, e.g. `source=api` or `target=crm`; empty for a global rule.
    pub scope: String,
    /// The rule's kind (`source_quiet`, `dispatch_lag`, ...).
    pub kind: String,
    /// The tenant the alert concerns, when it concerns one (tenant-limited callers see only
    /// their tenant's alerts; alerts without a tenant are for callers who see every tenant).
    pub tenant_id: Option<String>,
    /// `firing` or `resolved`.
    pub state: String,
    /// 1 for the first firing; each firing after a resolve adds one.
    pub episode: i32,
    /// What fired, in words.
    pub summary: String,
    /// The numbers behind it, as a JSON object.
    pub numbers: String,
    /// When the condition began (e.g. a quiet source's last delivery).
    pub since: i64,
    /// When this episode fired.
    pub fired_at: i64,
    pub resolved_at: Option<i64>,
    pub acknowledged_at: Option<i64>,
    pub acknowledged_by: Option<String>,
    /// No notification for a new firing before this time.
    pub silenced_until: Option<i64>,
    pub silenced_by: Option<String>,
    pub updated_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
