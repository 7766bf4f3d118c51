//! `switchyard schedule`: the next fires of every `[[schedule]]` of a config file, in UTC and
//! in the schedule's local time: the admin's check before a reload. Reads no database.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use chrono::{DateTime, Utc};

use crate::config::LoadedConfig;
use crate::config::schedules::{ScheduleConfig, fire_id};

/// The next `count` fires of each schedule at or after `from` (default: now), as text.
pub fn schedule(config: &Path, from: Option<&str>, count: usize) -> anyhow::Result<String> {
    let loaded = LoadedConfig::load(config)?;
    let from = match from {
        Some(text) => DateTime::parse_from_rfc3339(text)
            .with_context(|| {
                format!("--from `{text}` is not an RFC 3339 instant (2027-03-28T01:00:00Z)")
            })?
            .with_timezone(&Utc),
        None => Utc::now(),
    };
    let schedules = &loaded.config.schedules;
    if schedules.is_empty() {
        return Ok(format!("{} has no [[schedule]]\n", config.display()));
    }
    let mut out = String::new();
    for schedule in schedules {
        render(&mut out, schedule, from, count)?;
    }
    Ok(out)
}

fn render(
    out: &mut String,
    schedule: &ScheduleConfig,
    from: DateTime<Utc>,
    count: usize,
) -> anyhow::Result<()> {
    let timing = schedule
        .timing()
        .map_err(|why| anyhow::anyhow!("schedule `{}`: {why}", schedule.id))?;
    let rule = match (&schedule.cron, schedule.every) {
        (Some(cron), _) => format!("cron `{cron}`"),
        (None, Some(every)) => format!("every {}", humantime::format_duration(every)),
        (None, None) => String::new(),
    };
    let _ = writeln!(
        out,
        "schedule {} (tenant {}, {rule}, {}, catch_up {})",
        schedule.id,
        schedule.tenant,
        schedule.time_zone,
        schedule.catch_up.as_str()
    );
    // At or after `from`: fires are whole seconds.
    let mut at = from - chrono::Duration::milliseconds(1);
    for _ in 0..count {
        let Some(next) = timing.next_after(at) else {
            let _ = writeln!(out, "  (no more fires)");
            break;
        };
        let local = next.with_timezone(&timing.zone());
        let _ = writeln!(
            out,
            "  {}  {} {}",
            fire_id(next),
            local.format("%Y-%m-%dT%H:%M:%S%:z"),
            local.format("%Z")
        );
        at = next;
    }
    Ok(())
}
