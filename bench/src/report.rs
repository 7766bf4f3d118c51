//! The results as Markdown on stdout (progress goes to stderr), ready for BENCHMARKS.md.

use std::path::Path;

use crate::args::BenchArgs;
use crate::load::RunResult;
use crate::plan::{BackendResult, Target};
use crate::procfs::Memory;
use crate::soak::SoakResult;
use crate::startup::{StartupResult, median};

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn first_line_of(path: &str, prefix: &str) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with(prefix))
                .map(|line| {
                    line.split_once(':')
                        .map_or(line, |(_, value)| value)
                        .trim()
                        .to_owned()
                })
        })
        .unwrap_or_else(|| "?".into())
}

pub fn print_header(args: &BenchArgs, binary: &Path) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("# switchyard-bench\n");
    println!(
        "- machine: {cores} cores, {} memory, CPU `{}`, kernel `{}`",
        first_line_of("/proc/meminfo", "MemTotal"),
        first_line_of("/proc/cpuinfo", "model name"),
        kernel.trim()
    );
    println!("- load average at start: {}", loadavg.trim());
    println!(
        "- daemon: `{}`, log filter `{}`, SQLite durability `{}`, extra environment {:?}",
        binary.display(),
        args.daemon_log,
        args.durability,
        args.daemon_env
    );
    println!(
        "- each run: {} warm-up + {} measured, closed loop, concurrency {:?}, {:.0}% of requests on one shared ticket per run, repeats {}",
        humantime::format_duration(args.warmup),
        humantime::format_duration(args.duration),
        args.concurrency,
        args.hot_share * 100.0,
        args.repeat
    );
    println!(
        "- the load generator is this process: one current-thread tokio runtime, keep-alive \
         HTTP/1.1 connections, bodies spliced from fixed pieces (the dispatch scenarios' http \
         sink has a thread and runtime of its own); it shares the {cores} cores with the server \
         under test (its CPU use, the sink's included, is in the `gen CPU` column)\n"
    );
}

fn outcomes(result: &RunResult) -> String {
    let total: u64 = result.outcomes.values().sum();
    if total == 0 {
        return "-".into();
    }
    result
        .outcomes
        .iter()
        .map(|(outcome, n)| format!("{outcome} {:.1}%", *n as f64 * 100.0 / total as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The error count, with the statuses of error answers.
fn errors(result: &RunResult) -> String {
    let statuses: Vec<String> = result
        .statuses
        .iter()
        .filter(|(status, _)| !(200..300).contains(*status))
        .map(|(status, n)| format!("{n}x{status}"))
        .collect();
    if statuses.is_empty() {
        result.errors.to_string()
    } else {
        format!("{} ({})", result.errors, statuses.join(", "))
    }
}

fn memory(memory: Memory) -> String {
    format!("{:.1} / {:.1}", mib(memory.rss_kib), mib(memory.hwm_kib))
}

pub fn print_backend(args: &BenchArgs, result: &BackendResult) {
    let backend = result.backend;
    println!("## {}\n", backend.name());
    println!(
        "Daemon RSS idle after start: {:.1} MiB (peak so far {:.1} MiB); idle after all load: {:.1} MiB (peak {:.1} MiB). \
         Daemon log lines written: {}, of which WARN/ERROR: {}.\n",
        mib(result.idle.rss_kib),
        mib(result.idle.hwm_kib),
        mib(result.after.rss_kib),
        mib(result.after.hwm_kib),
        result.daemon_log_lines,
        result.daemon_warnings.0
    );
    if let Some(first) = &result.daemon_warnings.1 {
        println!(
            "First daemon warning: `{}`\n",
            first.chars().take(400).collect::<String>()
        );
    }
    println!(
        "| scenario | conc | server | answers/s | routed/s | p50 ms | p99 ms | max ms | errors | outcomes | server CPU | CPU µs/answer | gen CPU | other CPU | RSS / peak MiB |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|");
    for cell in &result.cells {
        for (target, _) in &cell.runs {
            let Some(run) = cell.median(*target) else {
                continue;
            };
            println!(
                "| {} | {} | {} | {:.0} | {} | {:.2} | {:.2} | {:.1} | {} | {} | {:.2} | {:.0} | {:.2} | {:.2} | {} |",
                cell.scenario.name(),
                cell.concurrency,
                target.name(backend),
                run.ok_per_sec(),
                if matches!(*target, Target::Daemon | Target::Flow) {
                    format!("{:.0}", run.outcome_per_sec("routed"))
                } else {
                    "-".into()
                },
                run.latency_ms(0.5),
                run.latency_ms(0.99),
                run.max_ms(),
                errors(run),
                outcomes(run),
                run.cpu.server_cores,
                run.cpu.server_us_per_request,
                run.cpu.generator_cores,
                run.cpu.other_cores,
                memory(run.memory),
            );
        }
    }
    if args.flow_control {
        println!("\nWhat flow control costs (answers/s, same run; the target is at most 15%):\n");
        println!("| scenario | conc | with / without | cost | p99 with / without ms |");
        println!("|---|---:|---:|---:|---|");
        for cell in &result.cells {
            let (Some(plain), Some(flow)) =
                (cell.median(Target::Daemon), cell.median(Target::Flow))
            else {
                continue;
            };
            let ratio = flow.ok_per_sec() / plain.ok_per_sec().max(1e-9);
            println!(
                "| {} | {} | {:.3} | {:.1}% | {:.2} / {:.2} |",
                cell.scenario.name(),
                cell.concurrency,
                ratio,
                (1.0 - ratio) * 100.0,
                flow.latency_ms(0.99),
                plain.latency_ms(0.99),
            );
        }
        println!();
        return;
    }
    if args.no_baselines {
        println!();
        return;
    }
    println!("\nRatios of the daemon to the baselines (answers/s, same run):\n");
    println!(
        "| scenario | conc | daemon / bare axum | daemon / {} | p99 daemon / bare / insert ms |",
        Target::Insert.name(backend)
    );
    println!("|---|---:|---:|---:|---|");
    for cell in &result.cells {
        let (Some(daemon), Some(bare), Some(insert)) = (
            cell.median(Target::Daemon),
            cell.median(Target::Bare),
            cell.median(Target::Insert),
        ) else {
            continue;
        };
        println!(
            "| {} | {} | {:.3} | {:.2} | {:.2} / {:.2} / {:.2} |",
            cell.scenario.name(),
            cell.concurrency,
            daemon.ok_per_sec() / bare.ok_per_sec().max(1e-9),
            daemon.ok_per_sec() / insert.ok_per_sec().max(1e-9),
            daemon.latency_ms(0.99),
            bare.latency_ms(0.99),
            insert.latency_ms(0.99),
        );
    }
    for cell in &result.cells {
        for (target, runs) in &cell.runs {
            if runs.len() > 1 {
                let rates: Vec<String> = runs
                    .iter()
                    .map(|r| format!("{:.0}", r.ok_per_sec()))
                    .collect();
                println!(
                    "\n- {} c={} {}: answers/s of each run {}",
                    cell.scenario.name(),
                    cell.concurrency,
                    target.name(backend),
                    rates.join(", ")
                );
            }
        }
    }
    for cell in &result.cells {
        if let Some(error) = cell
            .median(Target::Daemon)
            .and_then(|run| run.first_error.as_ref())
        {
            println!(
                "\n- {} c={}: first daemon error: `{}`",
                cell.scenario.name(),
                cell.concurrency,
                error.chars().take(300).collect::<String>()
            );
        }
    }
    println!();
}

pub fn print_startup(result: &StartupResult) {
    println!("## Startup to ready (SQLite, spawn to first `/readyz` 200)\n");
    println!(
        "| workflows | database | listening ms (median) | ready ms (median) | ready ms (all runs) | RSS at ready MiB |"
    );
    println!("|---:|---|---:|---:|---|---:|");
    for series in &result.series {
        for (label, starts) in [
            ("new (migrate + sync)", &series.cold),
            ("restart", &series.warm),
        ] {
            let all: Vec<String> = starts
                .iter()
                .map(|s| format!("{:.0}", s.ready.as_secs_f64() * 1000.0))
                .collect();
            println!(
                "| {} | {label} | {:.0} | {:.0} | {} | {:.1} |",
                series.workflows,
                median(starts.iter().map(|s| s.listening.as_secs_f64() * 1000.0)).unwrap_or(0.0),
                median(starts.iter().map(|s| s.ready.as_secs_f64() * 1000.0)).unwrap_or(0.0),
                all.join(", "),
                median(starts.iter().map(|s| mib(s.rss_kib))).unwrap_or(0.0),
            );
        }
    }
    println!();
}

pub fn print_soak(result: &SoakResult) {
    let rss: Vec<u64> = result.samples.iter().map(|(_, kib)| *kib).collect();
    let first = rss.first().copied().unwrap_or(0);
    let last = rss.last().copied().unwrap_or(0);
    let max = rss.iter().copied().max().unwrap_or(0);
    println!(
        "## Memory over a long run (SQLite, webhook, concurrency {}, {})\n",
        result.concurrency,
        humantime::format_duration(result.duration)
    );
    println!(
        "| idle MiB | first sample MiB | last MiB | max MiB | peak (VmHWM) MiB | answers/s | p99 ms | errors | database on disk MiB |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {:.2} | {} | {:.0} |\n",
        mib(result.idle.rss_kib),
        mib(first),
        mib(last),
        mib(max),
        mib(result.load.memory.hwm_kib),
        result.load.ok_per_sec(),
        result.load.latency_ms(0.99),
        result.load.errors,
        result.database_bytes as f64 / 1024.0 / 1024.0
    );
    let samples: Vec<String> = result
        .samples
        .iter()
        .map(|(t, kib)| format!("{t:.0}s {:.1}", mib(*kib)))
        .collect();
    println!("RSS samples (MiB): {}\n", samples.join(", "));
}
