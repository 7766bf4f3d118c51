//! Dispatch lag per workflow: each workflow's earliest-due pending dispatch, read by index
//! (`dispatches_workflow_due`, m0021): one seek per workflow named, never a count of the
//! backlog.

use std::collections::HashMap;

use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Select,
};

use crate::Millis;
use crate::entities::dispatch::{self, DispatchStatus};

/// A workflow's earliest-due pending dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingHead {
    /// When it is (or was) due: its first try, its next retry, or its claim's lapse.
    pub due_at: Millis,
    /// When the dispatch was written.
    pub created_at: Millis,
}

impl PendingHead {
    /// How long it has been due without a dispatcher or worker taking it at `now` (0 while
    /// it is not yet due, or while a claim on it has not lapsed).
    pub fn lag(&self, now: Millis) -> Millis {
        (now - self.due_at).max(0)
    }
}

/// The statement that reads `workflow_id`'s earliest-due pending dispatch.
pub fn head_select(workflow_id: &str) -> Select<dispatch::Entity> {
    dispatch::Entity::find()
        .filter(dispatch::Column::WorkflowId.eq(workflow_id))
        .filter(dispatch::Column::Status.eq(DispatchStatus::Pending))
        .order_by_asc(dispatch::Column::DueAt)
        .limit(1)
}

/// The earliest-due pending dispatch of each workflow of `workflow_ids` that has one.
pub async fn pending_heads<C: ConnectionTrait>(
    db: &C,
    workflow_ids: &[&str],
) -> Result<HashMap<String, PendingHead>, DbErr> {
    let mut heads = HashMap::new();
    for workflow_id in workflow_ids {
        if let Some(row) = head_select(workflow_id).one(db).await? {
            heads.insert(
                (*workflow_id).to_owned(),
                PendingHead {
                    due_at: row.due_at,
                    created_at: row.created_at,
                },
            );
        }
    }
    Ok(heads)
}
