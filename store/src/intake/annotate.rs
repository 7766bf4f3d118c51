//! The ledger columns only some deliveries fill: what shadow workflows would have done
//! (`shadow`) and the live replay a re-admitted delivery belongs to (`replay_id`,
//! `replay_of`). The SQLite and PostgreSQL writers insert ledger rows through fixed statements
//! without them and set them here, one UPDATE per annotated row in the batch's transaction, so
//! a batch without any costs nothing more; the MySQL writer inserts whole models, these
//! columns included.

use crate::entities::intake;

/// One ledger row's annotations.
#[derive(Debug)]
pub(crate) struct Annotation {
    pub id: String,
    pub shadow: Option<String>,
    pub replay_id: Option<String>,
    pub replay_of: Option<String>,
}

/// `(shadow, replay_id, replay_of, id)`.
pub(crate) const SQLITE: &str =
    "UPDATE intake SET shadow = ?1, replay_id = ?2, replay_of = ?3 WHERE id = ?4";
pub(crate) const POSTGRES: &str =
    "UPDATE intake SET shadow = $1, replay_id = $2, replay_of = $3 WHERE id = $4";

/// The annotated rows of a batch's ledger (no allocation when there is none).
pub(crate) fn of(ledger: &[intake::Model]) -> Vec<Annotation> {
    ledger
        .iter()
        .filter(|row| row.shadow.is_some() || row.replay_id.is_some())
        .map(|row| Annotation {
            id: row.id.clone(),
            shadow: row.shadow.clone(),
            replay_id: row.replay_id.clone(),
            replay_of: row.replay_of.clone(),
        })
        .collect()
}
