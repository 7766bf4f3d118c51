//! `switchyard-bench`: drives the release daemon over HTTP on 127.0.0.1 and compares it with
//! baselines that show the machine's limit. See BENCHMARKS.md for the command and the results.
//!
//! One process, one current-thread tokio runtime: the load generator, the orchestration and the
//! sampling of the daemon's `/proc` figures. The daemon and each baseline server run as child
//! processes (the baselines are this binary re-run with the hidden `serve-baseline` command),
//! so every server under test has its own runtime, as it would in production.

mod args;
mod baseline;
mod child;
mod config;
mod dispatch;
mod load;
mod plan;
mod postgres;
mod procfs;
mod replay;
mod report;
mod soak;
mod startup;
mod workload;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::ServeBaseline(serve)) => baseline::serve(serve),
        None => {
            // The generator stays on one thread so it takes at most one of the two cores.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(plan::run(cli.bench))
        }
    }
}
