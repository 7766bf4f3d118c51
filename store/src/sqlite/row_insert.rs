//! A table's multi-row `INSERT OR ROLLBACK` statements for the SQLite intake writer: a batch's
//! new rows go in as few statements as [`ROWS_PER_INSERT`] allows, each statement's text built
//! once per process.
//!
//! Invariant: a failed row ends the whole transaction (`OR ROLLBACK`), as the writer does on any
//! error; no statement journal is kept to undo one statement alone.

use std::sync::OnceLock;

use rusqlite::Transaction;
use rusqlite::types::ToSql;

/// How many rows one `INSERT` of a [`RowInsert`] carries: a batch's rows go in as few
/// statements as these sizes allow, so each table has at most three cached statements. A
/// statement per row paid SQLite's per-statement work (the program run from its start, a cursor
/// opened and closed on the table and on each of its indexes) once per row.
const ROWS_PER_INSERT: [usize; 3] = [16, 4, 1];

/// Binds a row's next value.
type Bind<'b> = dyn FnMut(&dyn ToSql) -> rusqlite::Result<()> + 'b;

/// A table's multi-row `INSERT OR ROLLBACK`s into `into` (`table (columns)`), one statement per
/// size in [`ROWS_PER_INSERT`], their text built at first use, not per batch. A plain insert: a
/// row that exists fails it, as one row's insert would. `OR ROLLBACK` ends the transaction at
/// once, as the writer does on any error (the whole batch is tried again or failed), so SQLite
/// keeps no statement journal to undo a multi-row statement alone: that journal cost more than
/// the rows saved (BENCHMARKS.md round 26).
pub(super) struct RowInsert {
    into: &'static str,
    /// The column count, and each size's statement.
    built: OnceLock<(usize, [String; 3])>,
}

impl RowInsert {
    pub(super) const fn new(into: &'static str) -> Self {
        Self {
            into,
            built: OnceLock::new(),
        }
    }

    fn built(&self) -> &(usize, [String; 3]) {
        self.built.get_or_init(|| {
            let columns = self
                .into
                .rsplit_once('(')
                .map_or(0, |(_, list)| list.split(',').count());
            let row = format!("({})", vec!["?"; columns].join(", "));
            let sql = ROWS_PER_INSERT.map(|rows| {
                format!(
                    "INSERT OR ROLLBACK INTO {} VALUES {}",
                    self.into,
                    vec![row.as_str(); rows].join(", ")
                )
            });
            (columns, sql)
        })
    }

    /// Inserts `items` (none: nothing is prepared), `values` binding each row's values in
    /// column order.
    pub(super) fn insert<T>(
        &self,
        txn: &Transaction<'_>,
        items: &[T],
        values: impl Fn(&T, &mut Bind<'_>) -> rusqlite::Result<()>,
    ) -> rusqlite::Result<()> {
        let (columns, statements) = self.built();
        let mut rest = items;
        while !rest.is_empty() {
            let (size, sql) = ROWS_PER_INSERT
                .iter()
                .zip(statements)
                .find(|(size, _)| **size <= rest.len())
                .unwrap_or((&1, &statements[2]));
            let (chunk, after) = rest.split_at(*size);
            let mut insert = txn.prepare_cached(sql)?;
            let mut bound = 0;
            for item in chunk {
                values(item, &mut |value| {
                    bound += 1;
                    insert.raw_bind_parameter(bound, value)
                })?;
            }
            if bound != size * columns {
                return Err(rusqlite::Error::InvalidParameterCount(
                    bound,
                    size * columns,
                ));
            }
            insert.raw_execute()?;
            rest = after;
        }
        Ok(())
    }
}
