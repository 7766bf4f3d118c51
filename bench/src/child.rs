//! A server under test as a child process: spawned, its port read from the JSON "listening"
//! log line, its stderr drained (and counted) for its whole life, stopped on drop.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

/// Log lines kept for error messages.
const KEPT_LINES: usize = 40;

#[derive(Debug, Default)]
struct Logs {
    /// The first lines (startup) and the most recent ones.
    head: Vec<String>,
    tail: std::collections::VecDeque<String>,
    addr: Option<SocketAddr>,
    /// WARN and ERROR lines seen, and the first of them.
    warnings: u64,
    first_warning: Option<String>,
}

/// A running server.
#[derive(Debug)]
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    pub spawned_at: Instant,
    pub listening_after: Duration,
    logs: Arc<Mutex<Logs>>,
    lines: Arc<AtomicU64>,
}

impl Server {
    /// Spawns `command` (stderr is taken over) and waits for its "listening" line.
    pub async fn spawn(command: Command, what: &str) -> anyhow::Result<Server> {
        Self::spawn_logged(command, what, None).await
    }

    /// As [`Server::spawn`], also copying every stderr line to `log` when given.
    pub async fn spawn_logged(
        mut command: Command,
        what: &str,
        log: Option<&Path>,
    ) -> anyhow::Result<Server> {
        let copy = match log {
            Some(path) => Some(std::io::BufWriter::new(
                std::fs::File::create(path)
                    .with_context(|| format!("cannot create {}", path.display()))?,
            )),
            None => None,
        };
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let spawned_at = Instant::now();
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start {what}"))?;
        let stderr = child.stderr.take().context("no stderr")?;
        let logs = Arc::new(Mutex::new(Logs::default()));
        let lines = Arc::new(AtomicU64::new(0));
        let (sink, count) = (logs.clone(), lines.clone());
        std::thread::spawn(move || drain(stderr, copy, &sink, &count));
        let deadline = spawned_at + Duration::from_secs(60);
        let addr = loop {
            if let Some(addr) = lock(&logs).addr {
                break addr;
            }
            if let Ok(Some(status)) = child.try_wait() {
                bail!(
                    "{what} exited with {status} before listening:\n{}",
                    lock(&logs).head.join("\n")
                );
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("{what} did not listen within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        Ok(Server {
            child,
            addr,
            listening_after: spawned_at.elapsed(),
            spawned_at,
            logs,
            lines,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Log lines written so far.
    pub fn log_lines(&self) -> u64 {
        self.lines.load(Ordering::Relaxed)
    }

    /// How many WARN/ERROR lines the server logged, and the first one.
    pub fn warnings(&self) -> (u64, Option<String>) {
        let logs = lock(&self.logs);
        (logs.warnings, logs.first_warning.clone())
    }

    /// The first and the latest log lines, for error messages.
    pub fn log_excerpt(&self) -> String {
        let logs = lock(&self.logs);
        let mut text = logs.head.join("\n");
        text.push_str("\n...\n");
        text.push_str(&logs.tail.iter().cloned().collect::<Vec<_>>().join("\n"));
        text
    }

    /// Stops the server with SIGTERM (SIGKILL after 10 s).
    pub fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.terminate();
    }
}

fn lock(logs: &Mutex<Logs>) -> std::sync::MutexGuard<'_, Logs> {
    logs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn drain(
    stderr: std::process::ChildStderr,
    mut copy: Option<impl Write>,
    logs: &Mutex<Logs>,
    count: &AtomicU64,
) {
    let mut reader = BufReader::new(stderr);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if let Some(copy) = copy.as_mut() {
            // Best effort: a full disk must not stop the server under test.
            let _ = copy.write_all(line.as_bytes());
        }
        count.fetch_add(1, Ordering::Relaxed);
        let mut logs = lock(logs);
        if logs.addr.is_none() {
            logs.addr = listening_addr(&line);
        }
        let text = line.trim_end().to_owned();
        if text.contains(r#""level":"WARN""#) || text.contains(r#""level":"ERROR""#) {
            logs.warnings += 1;
            if logs.first_warning.is_none() {
                logs.first_warning = Some(text.clone());
            }
        }
        if logs.head.len() < KEPT_LINES {
            logs.head.push(text);
        } else {
            if logs.tail.len() == KEPT_LINES {
                logs.tail.pop_front();
            }
            logs.tail.push_back(text);
        }
    }
}

/// The address of a tracing JSON line `{"fields":{"message":"listening","addr":...}}`.
fn listening_addr(line: &str) -> Option<SocketAddr> {
    if !line.contains("listening") {
        return None;
    }
    let value: Value = serde_json::from_str(line).ok()?;
    if value["fields"]["message"] != "listening" {
        return None;
    }
    value["fields"]["addr"].as_str()?.parse().ok()
}
