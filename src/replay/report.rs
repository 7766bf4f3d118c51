//! How outcomes move between the original decisions and a replay: per event type, each
//! bucket (the workflow a delivery was routed to, or the outcome word) before and after, and
//! for every changed cell (from -> to) its count with example deliveries. The table of
//! `switchyard check --candidate --against-ledger`, `GET /v1/replays/{id}` and the console.

use std::collections::BTreeMap;

use serde::Serialize;

use super::engine::bucket;

/// Example deliveries kept per changed cell.
const EXAMPLES: usize = 3;

/// A delivery named as an example.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Example {
    pub intake_id: String,
    pub delivery_id: String,
}

/// Counts of (event type, before, after), with examples of changed cells.
#[derive(Debug, Default)]
pub struct Tally {
    cells: BTreeMap<(String, String, String), (u64, Vec<Example>)>,
}

/// One event type's line of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub event_type: String,
    /// Each bucket's count before and after, in the order first seen (alphabetical).
    pub buckets: Vec<Bucket>,
    /// The cells that changed.
    pub moves: Vec<Move>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Bucket {
    pub bucket: String,
    pub before: u64,
    pub after: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Move {
    pub from: String,
    pub to: String,
    pub count: u64,
    pub examples: Vec<Example>,
}

impl Tally {
    /// Counts one delivery (`examples` only kept for a changed cell).
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        event_type: Option<&str>,
        original: (&str, Option<&str>),
        replayed: (&str, Option<&str>),
        count: u64,
        example: Option<Example>,
    ) {
        let from = bucket(original.0, original.1);
        let to = bucket(replayed.0, replayed.1);
        let changed = from != to;
        let cell = self
            .cells
            .entry((event_type.unwrap_or("(no event)").to_owned(), from, to))
            .or_default();
        cell.0 += count;
        if changed
            && cell.1.len() < EXAMPLES
            && let Some(example) = example
        {
            cell.1.push(example);
        }
    }

    /// Takes the examples another tally collected for the same cells.
    pub fn take_examples(&mut self, other: Tally) {
        for (key, (_, examples)) in other.cells {
            if let Some(cell) = self.cells.get_mut(&key) {
                cell.1 = examples;
            }
        }
    }

    /// Deliveries whose bucket changed.
    pub fn changed(&self) -> u64 {
        self.cells
            .iter()
            .filter(|((_, from, to), _)| from != to)
            .map(|(_, (n, _))| n)
            .sum()
    }

    pub fn total(&self) -> u64 {
        self.cells.values().map(|(n, _)| n).sum()
    }

    pub fn lines(&self) -> Vec<Line> {
        let mut lines: BTreeMap<&str, Line> = BTreeMap::new();
        for ((event_type, from, to), (count, examples)) in &self.cells {
            let line = lines.entry(event_type).or_insert_with(|| Line {
                event_type: event_type.clone(),
                buckets: Vec::new(),
                moves: Vec::new(),
            });
            for (name, before, after) in [(from, *count, 0), (to, 0, *count)] {
                match line.buckets.iter_mut().find(|b| &b.bucket == name) {
                    Some(b) => {
                        b.before += before;
                        b.after += after;
                    }
                    None => line.buckets.push(Bucket {
                        bucket: name.clone(),
                        before,
                        after,
                    }),
                }
            }
            if from != to {
                line.moves.push(Move {
                    from: from.clone(),
                    to: to.clone(),
                    count: *count,
                    examples: examples.clone(),
                });
            }
        }
        let mut lines: Vec<Line> = lines.into_values().collect();
        for line in &mut lines {
            line.buckets.sort_by(|a, b| a.bucket.cmp(&b.bucket));
        }
        lines
    }

    /// The table as text: one line per event type, then each changed cell with examples.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for line in self.lines() {
            let cells: Vec<String> = line
                .buckets
                .iter()
                .map(|b| {
                    format!(
                        "{} {} -> {}",
                        b.bucket,
                        thousands(b.before),
                        thousands(b.after)
                    )
                })
                .collect();
            out.push_str(&format!("{}: {}\n", line.event_type, cells.join(", ")));
            for moved in &line.moves {
                let examples: Vec<String> = moved
                    .examples
                    .iter()
                    .map(|e| format!("{} (delivery {})", e.intake_id, e.delivery_id))
                    .collect();
                out.push_str(&format!(
                    "  {} -> {}: {}{}\n",
                    moved.from,
                    moved.to,
                    thousands(moved.count),
                    if examples.is_empty() {
                        String::new()
                    } else {
                        format!(", e.g. {}", examples.join(", "))
                    }
                ));
            }
        }
        out
    }
}

/// `1204` as `1,204`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_reads_as_moves_per_event_type() {
        let mut tally = Tally::default();
        tally.add(
            Some("ticket.created"),
            ("routed", Some("triage")),
            ("routed", Some("triage")),
            980,
            None,
        );
        for i in 0..224 {
            tally.add(
                Some("ticket.created"),
                ("routed", Some("triage")),
                ("routed", Some("vip-triage")),
                1,
                Some(Example {
                    intake_id: format!("i{i}"),
                    delivery_id: format!("d{i}"),
                }),
            );
        }
        tally.add(
            Some("ticket.created"),
            ("no_trigger_match", None),
            ("no_trigger_match", None),
            31,
            None,
        );
        let text = tally.render();
        assert_eq!(
            text,
            "ticket.created: no_trigger_match 31 -> 31, triage 1,204 -> 980, vip-triage 0 -> 224\n  \
             triage -> vip-triage: 224, e.g. i0 (delivery d0), i1 (delivery d1), i2 (delivery d2)\n"
        );
        assert_eq!(tally.changed(), 224);
        assert_eq!(tally.total(), 1235);
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(12), "12");
    }
}
