//! `switchyard replay`: replays stored deliveries from the database the config names, in the
//! foreground with a progress bar on a terminal, and prints the report. Diagnostic by default
//! (writes only the replay and its results); `--live` re-admits the deliveries through an
//! intake of this process (the daemon's dispatcher delivers the runs it creates), after a
//! confirmation on a terminal unless `--yes`.
//!
//! `switchyard check --candidate --against-ledger` runs the same engine read-only
//! ([`what_if`]): nothing is stored.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use switchyard_store::Store;

use crate::config::{LoadedConfig, Settings, process_env};
use crate::dispatcher::Wake;
use crate::intake::Intake;
use crate::live::{Live, LiveConfig};
use crate::replay::engine::{self, Memory};
use crate::replay::report::{Example, Tally, thousands};
use crate::replay::runner::{Progress, StartError, parse_candidate};
use crate::replay::{Filters, Mode, Replayer, Request, RevisionChoice, Routing, Under};

/// What `switchyard replay` was asked.
#[derive(Debug, Clone)]
pub struct ReplayArgs {
    pub config: PathBuf,
    pub filters: Filters,
    pub revision: RevisionChoice,
    pub candidate: Option<PathBuf>,
    pub live: bool,
    pub yes: bool,
    /// Run a stored replay again under its parameters.
    pub rerun: Option<String>,
}

/// A `--since`/`--until` value: an RFC 3339 time, a date, or a span back from now (`24h`, `7d`).
pub fn parse_when(text: &str) -> Result<i64, String> {
    if let Ok(span) = humantime::parse_duration(text) {
        return Ok(switchyard_store::now_millis() - span.as_millis() as i64);
    }
    crate::http::admin::parse_time("time", text).map_err(|_| {
        format!("`{text}` is neither a time (2026-12-01T10:42:00Z), a date (2026-12-01) nor a span back from now (24h, 7d)")
    })
}

pub async fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let loaded = LoadedConfig::load(&args.config)?;
    let url = loaded.database_url().replace("mode=rwc", "mode=rw");
    let store = Store::open(&url, &loaded.config.database.store_options())
        .await
        .context("cannot open the database")?;
    let intake = if args.live {
        Some(live_intake(&loaded, &store)?)
    } else {
        None
    };
    let replayer = Replayer::new(store.clone(), intake, crate::edge::REGISTERED);
    let prepared = match &args.rerun {
        Some(id) => replayer.prepare_rerun(id, &loaded).await,
        None => {
            let candidate = match &args.candidate {
                Some(path) => Some(
                    std::fs::read_to_string(path)
                        .with_context(|| format!("cannot read {}", path.display()))?,
                ),
                None => None,
            };
            let revision = if candidate.is_some() {
                RevisionChoice::Candidate
            } else {
                args.revision
            };
            let mode = if args.live {
                Mode::Live
            } else {
                Mode::Diagnostic
            };
            if mode == Mode::Live {
                let upto = uuid::Uuid::now_v7().to_string();
                let total = store
                    .replay_count(&args.filters, &upto, Mode::Live.originals_only())
                    .await
                    .context("cannot read the ledger (is the database migrated?)")?;
                confirm(total, args.yes)?;
            }
            replayer
                .prepare(
                    Request {
                        mode,
                        revision,
                        candidate,
                        filters: args.filters.clone(),
                        actor: format!(
                            "cli:{}",
                            std::env::var("USER").unwrap_or_else(|_| "unknown".into())
                        ),
                    },
                    &loaded,
                )
                .await
        }
    }
    .map_err(|error| match error {
        StartError::Invalid(detail) => anyhow::anyhow!(detail),
        StartError::Store(error) => anyhow::Error::new(error)
            .context("cannot record the replay (is the database migrated?)"),
    })?;
    let id = prepared.row.id.clone();
    eprintln!(
        "replay {id}: {} deliveries, {} under {}",
        thousands(prepared.row.total.max(0) as u64),
        prepared.row.mode,
        prepared.row.revision
    );
    let bar = std::io::stderr().is_terminal();
    let row = replayer
        .run(prepared, |p| {
            if bar {
                progress_bar(&id, p);
            }
        })
        .await
        .context("the replay failed")?;
    if bar {
        eprintln!();
    }
    let tally = crate::http::replays::report(&store, &id).await?;
    println!(
        "replay {id} {}: {} replayed, {} differ",
        row.status,
        thousands(row.done.max(0) as u64),
        thousands(row.differ.max(0) as u64)
    );
    print!("{}", tally.render());
    for r in store.replay_results(&id, true, None, 20).await? {
        println!(
            "  {} {} {}: {}",
            r.intake_id,
            r.source,
            r.delivery_id,
            r.why.as_deref().unwrap_or("")
        );
    }
    if row.status == "failed" {
        anyhow::bail!("replay {id} failed: {}", row.error.unwrap_or_default());
    }
    Ok(())
}

/// Asks before a live replay acts on the world: on a terminal, `y`; elsewhere, `--yes`.
fn confirm(total: u64, yes: bool) -> anyhow::Result<()> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "a live replay re-admits {total} deliveries for real (runs, locks, dispatch); pass \
             --yes to confirm when not on a terminal"
        );
    }
    eprint!(
        "Re-admit {} deliveries for real? Runs are created and dispatched to workers. [y/N] ",
        thousands(total)
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        anyhow::bail!("live replay not confirmed; nothing was re-admitted")
    }
}

/// The intake of this process, on the config's database, for a live replay.
fn live_intake(loaded: &LoadedConfig, store: &Store) -> anyhow::Result<Intake> {
    let settings = Settings::resolve(loaded.clone(), &process_env)?;
    let live = LiveConfig::new(Live::new(settings));
    Intake::start(
        store,
        &loaded.config.database,
        live,
        Arc::new(Wake::default()),
    )
}

fn progress_bar(id: &str, p: Progress) {
    let width = 30;
    let done = p.done.min(p.total);
    let filled = (done * width as u64)
        .checked_div(p.total)
        .unwrap_or(width as u64) as usize;
    let percent = (done * 100).checked_div(p.total).unwrap_or(100);
    eprint!(
        "\rreplay {id}: [{}{}] {}/{} ({percent}%), {} differ",
        "#".repeat(filled),
        "-".repeat(width - filled),
        thousands(p.done),
        thousands(p.total),
        thousands(p.differ)
    );
    let _ = std::io::stderr().flush();
}

/// `check --candidate FILE --against-ledger SPAN`: the ledger of the last `span` decided again
/// under the candidate, read-only; returns the table.
pub async fn what_if(
    config: &Path,
    candidate: &Path,
    span: std::time::Duration,
) -> anyhow::Result<Tally> {
    let loaded = LoadedConfig::load(config)?;
    let text = std::fs::read_to_string(candidate)
        .with_context(|| format!("cannot read {}", candidate.display()))?;
    let candidate = parse_candidate(&text, &loaded).map_err(|e| anyhow::anyhow!(e.to_string()))?;
    let url = loaded.database_url().replace("mode=rwc", "mode=ro");
    let store = Store::open(&url, &loaded.config.database.store_options())
        .await
        .context("cannot open the database")?;
    let filters = Filters {
        since: Some(switchyard_store::now_millis() - span.as_millis() as i64),
        ..Filters::default()
    };
    let upto = uuid::Uuid::now_v7().to_string();
    let mut under = Under::Fixed(Arc::new(Routing::of_config("candidate", &candidate)));
    let mut memory = Memory::default();
    let mut tally = Tally::default();
    let mut after: Option<String> = None;
    loop {
        let rows = store
            .replay_page(
                &filters,
                &upto,
                Mode::Diagnostic.originals_only(),
                after.as_deref(),
                500,
            )
            .await
            .context("cannot read the ledger (is the database migrated?)")?;
        let Some(last) = rows.last().map(|r| r.id.clone()) else {
            break;
        };
        for r in engine::decide(
            &store,
            &mut under,
            &mut memory,
            rows,
            crate::edge::REGISTERED,
        )
        .await?
        {
            let o = &r.original;
            tally.add(
                o.event_type.as_deref(),
                (&o.outcome, o.workflow_id.as_deref()),
                (r.outcome.as_str(), r.workflow_id.as_deref()),
                1,
                Some(Example {
                    intake_id: o.id.clone(),
                    delivery_id: o.delivery_id.clone(),
                }),
            );
        }
        after = Some(last);
    }
    Ok(tally)
}
