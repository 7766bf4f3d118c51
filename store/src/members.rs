//! A coalesced run's members as intake recorded them (`run_members`: the deliveries that
//! joined a run in its coalescing window, each with its provider version, if any).
//!
//! Invariant: read in `(run_id, intake_id)` order, so arrival order (UUIDv7 intake ids) is kept.

use std::collections::HashMap;

use sea_orm::sea_query::{Alias, Expr, ExprTrait, Order, Query};
use sea_orm::{ConnectionTrait, DbErr};

use crate::Store;

/// `(intake id, provider version)` of a delivery that joined a run.
pub type Member = (String, Option<String>);

impl Store {
    /// The deliveries that joined each of `run_ids` (runs without any are absent), in arrival
    /// order.
    pub async fn run_members(
        &self,
        run_ids: &[&str],
    ) -> Result<HashMap<String, Vec<Member>>, DbErr> {
        let mut joined: HashMap<String, Vec<Member>> = HashMap::new();
        for chunk in run_ids.chunks(200) {
            let select = Query::select()
                .columns([
                    Alias::new("run_id"),
                    Alias::new("intake_id"),
                    Alias::new("version"),
                ])
                .from(Alias::new("run_members"))
                .and_where(Expr::col(Alias::new("run_id")).is_in(chunk.iter().copied()))
                .order_by(Alias::new("run_id"), Order::Asc)
                .order_by(Alias::new("intake_id"), Order::Asc)
                .to_owned();
            for row in self.db().query_all(&select).await? {
                let run_id: String = row.try_get_by_index(0)?;
                joined
                    .entry(run_id)
                    .or_default()
                    .push((row.try_get_by_index(1)?, row.try_get_by_index(2)?));
            }
        }
        Ok(joined)
    }
}
