//! What a dispatch run measured, per round and per push target, and its Markdown.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::args::{Backend, DispatchKind};
use crate::load::RunResult;

/// One closed-loop window of a push target.
#[derive(Debug)]
pub struct ClosedRound {
    /// Intake as the load generator saw it.
    pub intake: RunResult,
    /// Distinct runs that arrived during the measured window.
    pub delivered: usize,
    /// Pending runs at the end of the window, and the time the daemon took to deliver them.
    pub backlog: Option<u64>,
    pub drain: Option<Duration>,
}

impl ClosedRound {
    fn delivered_per_sec(&self) -> f64 {
        self.delivered as f64 / self.intake.window.as_secs_f64()
    }

    /// Delivered per second over `pull`'s routed per second (the pull daemon's same round).
    fn ratio_to(&self, pull: &RunResult) -> f64 {
        self.delivered_per_sec() / pull.outcome_per_sec("routed").max(1e-9)
    }
}

/// What one push target measured.
#[derive(Debug)]
pub struct DispatchRun {
    pub kind: DispatchKind,
    /// One closed loop per `--repeat`, each right after the pull daemon's of the same round.
    pub rounds: Vec<ClosedRound>,
    pub latency: Option<OpenLoop>,
    pub outage: Option<Outage>,
    pub daemon_warnings: (u64, Option<String>),
}

/// Open-loop figures.
#[derive(Debug)]
pub struct OpenLoop {
    pub rate: u64,
    pub sent: u64,
    pub routed: u64,
    pub arrived: u64,
    /// Request written to answer read, µs.
    pub answer_us: Histogram<u64>,
    /// Request written to the run's arrival at the worker, µs.
    pub to_worker_us: Histogram<u64>,
    /// Answer read to the run's arrival at the worker, µs (0 when the run arrived first):
    /// delivery's own share, apart from intake's.
    pub after_answer_us: Histogram<u64>,
}

/// A receiver outage under closed-loop load.
#[derive(Debug)]
pub struct Outage {
    pub before: RunResult,
    pub during: RunResult,
    pub refused: u64,
    pub pending_at_end: Option<u64>,
    pub drain: Option<Duration>,
}

/// Everything measured on one backend.
#[derive(Debug)]
pub struct DispatchResult {
    pub backend: Backend,
    /// The daemon with the built-in pull target under the same load, one closed loop per round.
    pub pull: Vec<RunResult>,
    pub pull_latency: Option<OpenLoop>,
    pub runs: Vec<DispatchRun>,
    /// Whether each open loop started right after a `CHECKPOINT` (PostgreSQL, by default).
    pub checkpointed: bool,
}

/// The results as Markdown.
pub fn print(result: &DispatchResult) {
    println!("## Dispatch on {}\n", result.backend.name());
    println!(
        "Closed loop, {} round(s); each round loads the daemon with the built-in pull target \
         (intake and outbox write, no delivery), then each push daemon. `delivered/s` counts \
         distinct runs that reached the worker in the measured window; the ratio is to the pull \
         daemon's routed/s in the same round.\n",
        result.pull.len()
    );
    println!(
        "| round | target | answers/s | routed/s | delivered/s | delivered / pull routed | p99 ms | daemon CPU | gen CPU | other CPU | pending at end | drained in s |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let row = |round: usize,
               name: &str,
               run: &RunResult,
               delivered: Option<(f64, f64)>,
               rest: String| {
        println!(
            "| {round} | {name} | {:.0} | {:.0} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {rest} |",
            run.ok_per_sec(),
            run.outcome_per_sec("routed"),
            delivered.map_or("-".into(), |(d, _)| format!("{d:.0}")),
            delivered.map_or("-".into(), |(_, ratio)| format!("{ratio:.2}")),
            run.latency_ms(0.99),
            run.cpu.server_cores,
            run.cpu.generator_cores,
            run.cpu.other_cores,
        );
    };
    for (i, pull) in result.pull.iter().enumerate() {
        row(i + 1, "pull (intake alone)", pull, None, "- | -".into());
        for run in &result.runs {
            let Some(round) = run.rounds.get(i) else {
                continue;
            };
            row(
                i + 1,
                run.kind.name(),
                &round.intake,
                Some((round.delivered_per_sec(), round.ratio_to(pull))),
                format!(
                    "{} | {}",
                    round.backlog.map_or("?".into(), |n| n.to_string()),
                    round
                        .drain
                        .map_or("not drained".into(), |d| format!("{:.1}", d.as_secs_f64())),
                ),
            );
        }
    }
    for run in &result.runs {
        let ratios: Vec<f64> = run
            .rounds
            .iter()
            .zip(&result.pull)
            .map(|(round, pull)| round.ratio_to(pull))
            .collect();
        let each = ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", ");
        // As every other table's median: the upper middle of an even count.
        if let Some(median) = crate::startup::median(ratios.iter().copied()) {
            println!(
                "\n{}: delivered / pull routed per round {each}; median **{median:.2}**; daemon \
                 WARN/ERROR lines {}.",
                run.kind.name(),
                run.daemon_warnings.0
            );
        }
    }
    println!(
        "\nOpen loop (event to worker: request written to the run's arrival at the worker){}:\n",
        if result.checkpointed {
            ", each started right after a CHECKPOINT of the server"
        } else {
            ""
        }
    );
    println!(
        "| target | rate/s | sent | routed | arrived | answer p50 / p99 ms | to worker p50 / p99 / max ms | answer to worker p50 / p99 ms |"
    );
    println!("|---|---:|---:|---:|---:|---|---|---|");
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let open = |name: &str, l: &OpenLoop, delivered: bool| {
        println!(
            "| {name} | {} | {} | {} | {} | {:.2} / {:.2} | {} | {} |",
            l.rate,
            l.sent,
            l.routed,
            if delivered {
                l.arrived.to_string()
            } else {
                "-".into()
            },
            ms(&l.answer_us, 0.5),
            ms(&l.answer_us, 0.99),
            if delivered {
                format!(
                    "{:.2} / {:.2} / {:.1}",
                    ms(&l.to_worker_us, 0.5),
                    ms(&l.to_worker_us, 0.99),
                    l.to_worker_us.max() as f64 / 1000.0
                )
            } else {
                "-".into()
            },
            if delivered {
                format!(
                    "{:.2} / {:.2}",
                    ms(&l.after_answer_us, 0.5),
                    ms(&l.after_answer_us, 0.99)
                )
            } else {
                "-".into()
            },
        );
    };
    if let Some(l) = &result.pull_latency {
        open("pull (intake alone)", l, false);
    }
    for run in &result.runs {
        if let Some(l) = &run.latency {
            open(run.kind.name(), l, true);
        }
    }
    for run in &result.runs {
        let Some(o) = &run.outage else { continue };
        println!(
            "\nReceiver outage ({}, sink answering 503 for {}): answers/s before {:.0}, during {:.0} \
             (ratio {:.2}); routed/s before {:.0}, during {:.0}; requests refused by the sink {}; \
             pending at the end of the outage {}; drained {} after the sink recovered (load stopped).",
            run.kind.name(),
            humantime::format_duration(o.during.window),
            o.before.ok_per_sec(),
            o.during.ok_per_sec(),
            o.during.ok_per_sec() / o.before.ok_per_sec().max(1e-9),
            o.before.outcome_per_sec("routed"),
            o.during.outcome_per_sec("routed"),
            o.refused,
            o.pending_at_end.map_or("?".into(), |n| n.to_string()),
            o.drain.map_or("not within 300 s".into(), |d| format!(
                "in {:.1} s",
                d.as_secs_f64()
            )),
        );
    }
    for run in &result.runs {
        if let Some(first) = &run.daemon_warnings.1 {
            println!(
                "\nFirst daemon warning ({}): `{}`",
                run.kind.name(),
                first.chars().take(400).collect::<String>()
            );
        }
    }
    println!();
}
