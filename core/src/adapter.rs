//! What an adapter hands the intake pipeline for one authenticated delivery.

use crate::Event;

/// An adapter's reading of one authenticated, parseable delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalized {
    /// Identifies this delivery within its source; a second delivery with the same id is a
    /// `duplicate`.
    pub delivery_id: String,
    pub disposition: Disposition,
}

/// Whether the delivery goes on to the router.
#[derive(Debug, Clone, PartialEq)]
pub enum Disposition {
    /// Route this event.
    Route(Event),
    /// Authenticated and well-formed, but excluded by a rule; `detail` names the rule
    /// (`bot_message`, `auto_reply`, `channel_join`, ...). The event is kept when one could be
    /// built, so the ledger shows what was excluded.
    Ineligible {
        detail: String,
        event: Option<Event>,
    },
}
