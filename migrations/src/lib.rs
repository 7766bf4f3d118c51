//! The Switchyard schema as sea-orm migrations. A released migration is never edited: change
//! the schema by adding a new one.

use sea_orm_migration::prelude::*;

mod m0001_initial;
mod m0002_dispatch;
mod m0003_binary_keys;
mod m0004_lease_expiry_index;
mod m0005_trace_context;
mod m0006_config_revisions;
mod m0007_flow_control;
mod m0008_authority;
mod m0009_waits;
mod m0010_replays;
mod m0011_light_run_indexes;
mod m0012_delivery_scope;
mod m0014_alerts;
mod m0015_mailbox_oauth;
mod m0016_slack;
mod m0017_alert_observations;
mod m0019_intake_entity;
mod m0020_operator_indexes;
mod m0021_dispatch_workflow_lag;
mod m0022_partial_key_indexes;
mod m0023_raw_in_ledger;

pub use m0001_initial::KEY_LEN;

/// Every migration, oldest first.
#[derive(Debug)]
pub struct Migrator;

impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m0001_initial::Migration),
            Box::new(m0002_dispatch::Migration),
            Box::new(m0003_binary_keys::Migration),
            Box::new(m0004_lease_expiry_index::Migration),
            Box::new(m0005_trace_context::Migration),
            Box::new(m0006_config_revisions::Migration),
            Box::new(m0007_flow_control::Migration),
            Box::new(m0008_authority::Migration),
            Box::new(m0009_waits::Migration),
            Box::new(m0010_replays::Migration),
            Box::new(m0011_light_run_indexes::Migration),
            Box::new(m0012_delivery_scope::Migration),
            Box::new(m0014_alerts::Migration),
            Box::new(m0015_mailbox_oauth::Migration),
            Box::new(m0016_slack::Migration),
            Box::new(m0017_alert_observations::Migration),
            Box::new(m0019_intake_entity::Migration),
            Box::new(m0020_operator_indexes::Migration),
            Box::new(m0021_dispatch_workflow_lag::Migration),
            Box::new(m0022_partial_key_indexes::Migration),
            Box::new(m0023_raw_in_ledger::Migration),
        ]
    }
}
