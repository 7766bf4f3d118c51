//! MySQL's intake writers: tasks on the pool, each running a batch through sea-orm in one
//! READ COMMITTED transaction (multi-row statements; the flow statements in [`super::flow`]).

use std::collections::HashMap;

use sea_orm::sea_query::OnConflict;
use sea_orm::{DatabaseConnection, DatabaseTransaction, DbErr, EntityTrait};

use super::MySql;
use super::flow as flow_store;
use crate::Millis;
use crate::entities::{dispatch, entity_lock, intake, mailbox_cursor, run_history};
use crate::intake::flow::{FlowFound, FlowKeys};
use crate::intake::order::{self, Steps};
use crate::intake::pool::failure;
use crate::intake::{Batch, Committed, Failure, Found, Keys, StoredAnswer, Writes};
use crate::lost_race::is_lost_race;
use crate::runs::begin_write;

#[async_trait::async_trait]
impl crate::driver::IntakeDriver for MySql {
    fn start_intake(
        &self,
        store: &crate::Store,
        sources: Vec<Box<dyn crate::intake::Batches>>,
    ) -> Result<(), DbErr> {
        for batches in sources {
            let mut writer = MySqlWriter {
                db: store.db().clone(),
            };
            tokio::spawn(async move {
                order::serve(&mut writer, batches).await;
            });
        }
        Ok(())
    }
}

/// A pool writer.
struct MySqlWriter {
    db: DatabaseConnection,
}

impl order::Writer for MySqlWriter {
    async fn commit(
        &mut self,
        batch: &mut dyn Batch,
        _more_waiting: crate::intake::order::MoreWaiting<'_>,
    ) -> Result<Committed, Failure> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match commit_once(&self.db, batch).await {
                Err(error) if attempt < order::ATTEMPTS && is_lost_race(&error) => {
                    tracing::debug!(%error, attempt, "batch lost a race with another writer; retrying");
                    tokio::time::sleep(order::backoff(attempt)).await;
                }
                result => return result.map_err(failure),
            }
        }
    }
}

async fn commit_once(db: &DatabaseConnection, batch: &mut dyn Batch) -> Result<Committed, DbErr> {
    let txn = begin_write(db).await?;
    let committed = order::decide_batch(&mut TxnSteps(&txn), batch, crate::now_millis()).await?;
    txn.commit().await?;
    Ok(committed)
}

/// A batch's steps in its transaction.
struct TxnSteps<'t>(&'t DatabaseTransaction);

fn answers_of<K: Eq + std::hash::Hash>(
    rows: HashMap<K, intake::Model>,
) -> HashMap<K, StoredAnswer> {
    rows.into_iter()
        .map(|(key, row)| (key, StoredAnswer::of(&row)))
        .collect()
}

impl Steps for TxnSteps<'_> {
    type Error = DbErr;

    async fn look_up(&mut self, keys: &Keys<'_>, now: Millis) -> Result<Found, DbErr> {
        let txn = self.0;
        let mut flow = FlowFound::default();
        flow_store::lock_gates(txn, &keys.flow, now, &mut flow).await?;
        Ok(Found {
            seen: answers_of(crate::ledger::existing_deliveries(txn, &keys.deliveries).await?),
            claimed: if keys.messages.is_empty() {
                HashMap::new()
            } else {
                answers_of(crate::ledger::claimed_messages(txn, &keys.messages).await?)
            },
            leases: crate::leases::lock_leases(txn, &keys.leases).await?,
            flow,
        })
    }

    async fn counts_and_windows(
        &mut self,
        flow: &FlowKeys,
        leases: &[entity_lock::Model],
        now: Millis,
        found: &mut FlowFound,
    ) -> Result<(), DbErr> {
        flow_store::counts(self.0, flow, found).await?;
        flow_store::windows(self.0, flow, leases, now, found).await
    }

    async fn write(&mut self, writes: Writes, now: Millis) -> Result<(), DbErr> {
        let txn = self.0;
        let Writes {
            ledger,
            raw,
            cursors,
            locks,
            dispatches,
            history,
            flow,
        } = writes;
        flow_store::replace(txn, &flow).await?;
        locks.persist(txn).await?;
        if !dispatches.is_empty() {
            dispatch::Entity::insert_many(dispatches.into_iter().map(dispatch::ActiveModel::from))
                .exec_without_returning(txn)
                .await?;
        }
        if !history.is_empty() {
            run_history::Entity::insert_many(
                history.into_iter().map(run_history::ActiveModel::from),
            )
            .exec_without_returning(txn)
            .await?;
        }
        crate::ledger::insert_with_raw(txn, ledger, raw).await?;
        if !cursors.is_empty() {
            mailbox_cursor::Entity::insert_many(
                cursors.into_iter().map(mailbox_cursor::ActiveModel::from),
            )
            .on_conflict(
                OnConflict::columns([
                    mailbox_cursor::Column::Source,
                    mailbox_cursor::Column::Mailbox,
                ])
                .update_columns([
                    mailbox_cursor::Column::Uidvalidity,
                    mailbox_cursor::Column::LastUid,
                    mailbox_cursor::Column::UpdatedAt,
                ])
                .to_owned(),
            )
            .exec_without_returning(txn)
            .await?;
        }
        flow_store::write(txn, &flow, now).await
    }

    fn refused(detail: String) -> DbErr {
        DbErr::Custom(detail)
    }
}
