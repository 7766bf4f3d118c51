//! Figures read from `/proc`: a process's memory and CPU time, and the whole machine's CPU time
//! (to see how much other work ran beside a measurement).

use std::time::Duration;

/// Linux reports `/proc` CPU times in USER_HZ ticks, fixed at 100 per second by the ABI.
const TICKS_PER_SEC: u64 = 100;

/// Resident memory of a process, in KiB.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    /// `VmRSS`: resident now.
    pub rss_kib: u64,
    /// `VmHWM`: the peak resident size since the process started.
    pub hwm_kib: u64,
}

pub fn memory(pid: u32) -> Option<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
    };
    Some(Memory {
        rss_kib: field("VmRSS:")?,
        hwm_kib: field("VmHWM:")?,
    })
}

/// User plus system CPU time of a process (all its threads).
pub fn cpu_time(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; fields are counted after its closing parenthesis.
    let after_name = &stat[stat.rfind(')')? + 2..];
    let mut fields = after_name.split_whitespace();
    // Fields 14 and 15 of the file are utime and stime; `after_name` starts at field 3.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(ticks(utime + stime))
}

/// Busy CPU time of the machine over all cores since boot.
pub fn machine_busy() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let values: Vec<u64> = line
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let total: u64 = values.iter().take(8).sum();
    let idle = values.get(3)? + values.get(4).unwrap_or(&0);
    Some(ticks(total - idle))
}

fn ticks(count: u64) -> Duration {
    Duration::from_millis(count * 1000 / TICKS_PER_SEC)
}

/// CPU counters at one instant, to be subtracted from a later snapshot.
#[derive(Debug, Clone, Copy)]
pub struct CpuSnapshot {
    server: Duration,
    generator: Duration,
    machine_busy: Duration,
}

/// CPU used between two snapshots, in cores (1.0 = one core busy all the time).
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuUse {
    pub server_cores: f64,
    pub generator_cores: f64,
    /// Everything else on the machine: other work sharing the two cores.
    pub other_cores: f64,
    /// Server CPU time per answered request, in microseconds.
    pub server_us_per_request: f64,
}

impl CpuSnapshot {
    pub fn take(server_pid: u32) -> Self {
        Self {
            server: cpu_time(&server_pid.to_string()).unwrap_or_default(),
            generator: cpu_time("self").unwrap_or_default(),
            machine_busy: machine_busy().unwrap_or_default(),
        }
    }

    pub fn since(&self, start: &CpuSnapshot, wall: Duration, requests: u64) -> CpuUse {
        let wall = wall.as_secs_f64().max(1e-9);
        let server = (self.server.saturating_sub(start.server)).as_secs_f64();
        let generator = (self.generator.saturating_sub(start.generator)).as_secs_f64();
        let busy = (self.machine_busy.saturating_sub(start.machine_busy)).as_secs_f64();
        CpuUse {
            server_cores: server / wall,
            generator_cores: generator / wall,
            other_cores: ((busy - server - generator) / wall).max(0.0),
            server_us_per_request: if requests == 0 {
                0.0
            } else {
                server * 1e6 / requests as f64
            },
        }
    }
}
