//! End-to-end tests: they start the built `switchyard` binary on a real database (SQLite,
//! PostgreSQL, MariaDB) and drive it over HTTP (and IMAP) as a user's systems would.

mod e2e {
    pub mod harness;

    mod access;
    mod alerts;
    mod api_contract;
    mod authority;
    mod bounded_runs;
    mod browser;
    mod browser_form;
    mod ceilings;
    mod chaos;
    mod cli;
    mod cloudevents;
    mod coalescing;
    mod concurrency;
    mod conditions;
    mod console;
    mod console_ops;
    mod dispatch;
    mod docs;
    mod email;
    mod email_oauth;
    mod email_start;
    mod hardening;
    mod hostile;
    mod json_webhook;
    mod key_indexes;
    mod leases;
    mod metrics;
    mod openapi;
    mod outage;
    mod pull;
    mod query_plans;
    mod raw_in_ledger;
    mod reload;
    mod replay;
    mod retention;
    mod revisions;
    mod schedules;
    mod security_access;
    mod security_edge;
    mod security_pull;
    mod security_tenants;
    mod shadow;
    mod slack;
    mod slack_socket;
    mod spine;
    mod sqlite;
    mod systemd;
    mod traces;
    mod waits;
    mod web_form;
    mod webhook;
}
