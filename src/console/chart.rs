//! Server-rendered SVG charts of the ledger: deliveries per bucket by outcome over a window
//! (the Deliveries page), and small routed/refused charts per workflow or source. No script,
//! no external asset: the markup is written here, its only text outcome names and numbers,
//! escaped.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use switchyard_store::ledger::{Bucket, ChartBy};
use switchyard_store::now_millis;

use super::ConsoleError;
use crate::http::AppState;

/// Bucket widths a chart may use, smallest first: the smallest that keeps a window within
/// [`MAX_BARS`] bars.
const WIDTHS: [(i64, &str); 6] = [
    (60_000, "minute"),
    (5 * 60_000, "5 minutes"),
    (15 * 60_000, "15 minutes"),
    (3_600_000, "hour"),
    (6 * 3_600_000, "6 hours"),
    (86_400_000, "day"),
];
const MAX_BARS: i64 = 180;
/// The window when the page names none: the last hour.
const DEFAULT_WINDOW: i64 = 3_600_000;

/// A chart ready for a template: `svg` is markup this module wrote (shown unescaped), the
/// counts per outcome over the whole window, and a caption that says what a bar is.
#[derive(Debug, Clone, Default)]
pub struct Chart {
    pub svg: String,
    pub counts: Vec<(String, i64)>,
    pub total: i64,
    pub caption: String,
}

/// The colour of an outcome's bars, the same family as its badge in the stylesheet.
fn colour(outcome: &str) -> &'static str {
    match outcome {
        "routed" | "resumed" => "#2f9e55",
        "entity_locked" | "coalesced" | "rate_limited" | "authority_unavailable" => "#d98e04",
        "invalid_event"
        | "dead_lettered"
        | "unauthorized_source"
        | "wait_expired"
        | "reapproval_required" => "#c53030",
        "no_trigger_match" | "ineligible" | "no_wait_match" => "#8a94a3",
        _ => "#5b6cc9",
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The bucket width for a window, and its name.
fn width_for(span: i64) -> (i64, &'static str) {
    WIDTHS
        .iter()
        .copied()
        .find(|(width, _)| span / width <= MAX_BARS)
        .unwrap_or(WIDTHS[WIDTHS.len() - 1])
}

/// The Deliveries chart: deliveries per bucket by outcome in `[since, until)` (default: the
/// hour up to now), of `tenants`.
pub async fn deliveries(
    state: &AppState,
    tenants: Option<&[String]>,
    since: Option<i64>,
    until: Option<i64>,
) -> Result<Chart, ConsoleError> {
    let now = now_millis();
    let until = until.unwrap_or(now + 1).min(now + 1);
    let since = since.unwrap_or(until - DEFAULT_WINDOW).min(until - 1);
    let (width, unit) = width_for(until - since);
    let buckets = state
        .store
        .ledger_chart(tenants, ChartBy::Ledger, since, until, width)
        .await?;
    Ok(stacked(&buckets, since, until, width, unit))
}

/// Deliveries per bucket, stacked by outcome, as an SVG 960 wide (it scales with the page).
pub fn stacked(buckets: &[Bucket], since: i64, until: i64, width: i64, unit: &str) -> Chart {
    let bars = ((until - since + width - 1) / width).max(1);
    let mut per_bar: BTreeMap<i64, Vec<(&str, i64)>> = BTreeMap::new();
    let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
    for b in buckets {
        let index = (b.bucket - since) / width;
        per_bar
            .entry(index)
            .or_default()
            .push((b.outcome.as_str(), b.count));
        *counts.entry(b.outcome.as_str()).or_default() += b.count;
    }
    let highest = per_bar
        .values()
        .map(|parts| parts.iter().map(|(_, n)| n).sum::<i64>())
        .max()
        .unwrap_or(0)
        .max(1);
    let (w, h, left, bottom) = (960.0_f64, 180.0_f64, 44.0_f64, 22.0_f64);
    let plot_w = w - left - 8.0;
    let plot_h = h - bottom - 8.0;
    let bar_w = plot_w / bars as f64;
    let total: i64 = counts.values().sum();
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<svg class="chart" viewBox="0 0 {w} {h}" role="img" aria-label="Deliveries per {unit} by outcome: {total} in the window" xmlns="http://www.w3.org/2000/svg">"##
    );
    // Axes: the highest bar's count and zero; the window's first and last times.
    let _ = write!(
        svg,
        r##"<line x1="{left}" y1="8" x2="{left}" y2="{y0}" stroke="#aeb5bf"/><line x1="{left}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#aeb5bf"/><text x="{tx}" y="16" text-anchor="end" font-size="11" fill="#5b6472">{highest}</text><text x="{tx}" y="{y0}" text-anchor="end" font-size="11" fill="#5b6472">0</text><text x="{left}" y="{ty}" font-size="11" fill="#5b6472">{from}</text><text x="{x1}" y="{ty}" text-anchor="end" font-size="11" fill="#5b6472">{to} UTC</text>"##,
        y0 = 8.0 + plot_h,
        x1 = left + plot_w,
        tx = left - 4.0,
        ty = h - 6.0,
        from = super::stamp(since),
        to = super::stamp(until),
    );
    for (index, parts) in &per_bar {
        let x = left + *index as f64 * bar_w;
        let mut y = 8.0 + plot_h;
        let mut parts = parts.clone();
        parts.sort_by_key(|(outcome, _)| *outcome != "routed");
        for (outcome, n) in parts {
            let bar_h = n as f64 / highest as f64 * plot_h;
            y -= bar_h;
            let _ = write!(
                svg,
                r##"<rect x="{x:.1}" y="{y:.1}" width="{bw:.1}" height="{bar_h:.1}" fill="{fill}"><title>{at}: {n} {outcome}</title></rect>"##,
                bw = (bar_w - 1.0).max(0.5),
                fill = colour(outcome),
                at = super::clock(since + index * width),
                outcome = escape(outcome),
            );
        }
    }
    svg.push_str("</svg>");
    let mut counts: Vec<(String, i64)> =
        counts.into_iter().map(|(o, n)| (o.to_owned(), n)).collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Chart {
        svg,
        counts,
        total,
        caption: format!(
            "Deliveries per {unit}, {} to {} UTC, by outcome.",
            super::stamp(since),
            super::stamp(until)
        ),
    }
}

/// One item's small chart and its totals.
#[derive(Debug, Clone, Default)]
pub struct Spark {
    pub svg: String,
    pub routed: i64,
    pub refused: i64,
}

/// A small chart per key (workflow or source) over the last 24 hours in hourly bars: routed
/// above the line in green, everything else below it in red (refused), each with its count.
pub async fn per_item(
    state: &AppState,
    tenants: Option<&[String]>,
    by: ChartBy,
) -> Result<BTreeMap<String, Spark>, ConsoleError> {
    const HOURS: i64 = 24;
    let until = now_millis() + 1;
    let since = until - HOURS * 3_600_000;
    let buckets = state
        .store
        .ledger_chart(tenants, by, since, until, 3_600_000)
        .await?;
    let mut series: BTreeMap<String, BTreeMap<i64, (i64, i64)>> = BTreeMap::new();
    for b in buckets {
        let Some(key) = b.key else { continue };
        let bar = series
            .entry(key)
            .or_default()
            .entry((b.bucket - since) / 3_600_000)
            .or_default();
        if b.outcome == "routed" {
            bar.0 += b.count;
        } else {
            bar.1 += b.count;
        }
    }
    Ok(series
        .into_iter()
        .map(|(key, bars)| (key, spark(&bars, HOURS)))
        .collect())
}

/// Hourly bars, routed up and refused down from a middle line.
fn spark(bars: &BTreeMap<i64, (i64, i64)>, count: i64) -> Spark {
    let (w, h) = (144.0_f64, 36.0_f64);
    let mid = h / 2.0;
    let highest = bars
        .values()
        .map(|(r, f)| (*r).max(*f))
        .max()
        .unwrap_or(0)
        .max(1);
    let (routed, refused): (i64, i64) = bars
        .values()
        .fold((0, 0), |(r, f), (br, bf)| (r + br, f + bf));
    let bar_w = w / count as f64;
    let mut svg = format!(
        r##"<svg class="spark" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="Last 24 hours: {routed} routed, {refused} refused" xmlns="http://www.w3.org/2000/svg"><title>Last 24 hours, hourly: {routed} routed, {refused} refused</title><line x1="0" y1="{mid}" x2="{w}" y2="{mid}" stroke="#d9dde3"/>"##
    );
    for (index, (r, f)) in bars {
        let x = *index as f64 * bar_w;
        let up = *r as f64 / highest as f64 * (mid - 1.0);
        let down = *f as f64 / highest as f64 * (mid - 1.0);
        if *r > 0 {
            let _ = write!(
                svg,
                r##"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{up:.1}" fill="#2f9e55"/>"##,
                mid - up,
                (bar_w - 1.0).max(0.5)
            );
        }
        if *f > 0 {
            let _ = write!(
                svg,
                r##"<rect x="{x:.1}" y="{mid:.1}" width="{:.1}" height="{down:.1}" fill="#c53030"/>"##,
                (bar_w - 1.0).max(0.5)
            );
        }
    }
    svg.push_str("</svg>");
    Spark {
        svg,
        routed,
        refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(at: i64, outcome: &str, count: i64) -> Bucket {
        Bucket {
            key: None,
            bucket: at,
            outcome: outcome.into(),
            count,
        }
    }

    #[test]
    fn a_window_gets_the_smallest_width_within_the_bar_limit() {
        assert_eq!(width_for(3_600_000).1, "minute");
        assert_eq!(width_for(3 * 3_600_000).1, "minute");
        assert_eq!(width_for(6 * 3_600_000).1, "5 minutes");
        assert_eq!(width_for(7 * 86_400_000).1, "hour");
        assert_eq!(width_for(3650 * 86_400_000).1, "day");
    }

    #[test]
    fn the_chart_counts_each_outcome_and_scales_to_the_highest_bar() {
        let chart = stacked(
            &[
                bucket(0, "routed", 3),
                bucket(0, "entity_locked", 1),
                bucket(120_000, "routed", 2),
                bucket(120_000, "<x>", 1),
            ],
            0,
            180_000,
            60_000,
            "minute",
        );
        assert_eq!(chart.total, 7);
        assert_eq!(chart.counts[0], ("routed".to_owned(), 5));
        assert_eq!(chart.svg.matches("<rect").count(), 4);
        assert!(chart.svg.contains("&lt;x&gt;"), "{}", chart.svg);
        assert!(!chart.svg.contains("<x>"));
        // The first bar (3 + 1) is the highest: its parts fill the plot's 150 px.
        assert!(chart.svg.contains(r#"height="112.5""#), "{}", chart.svg);
        assert!(chart.svg.contains(r#"height="37.5""#), "{}", chart.svg);
    }
}
