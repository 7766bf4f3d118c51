//! Where a mailbox seen for the first time starts (`start_from`), and the record of where it
//! did. Invariant: a start is decided once per mailbox (when it has no cursor) and is never
//! redone; a UIDVALIDITY change later rescans from UID 1 as before.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, FixedOffset, Utc};
use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// `start_from` of an email source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum StartFrom {
    /// Only mail that arrives after the first connection (the cursor starts at `UIDNEXT`).
    #[default]
    Now,
    /// Everything in the mailbox, from UID 1.
    Beginning,
    /// Mail received (IMAP internal date) since this instant: `UID SEARCH SINCE <day>`, then
    /// filtered to the exact instant where the server gives internal dates.
    Since(DateTime<FixedOffset>),
}

impl FromStr for StartFrom {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "now" => Ok(StartFrom::Now),
            "beginning" => Ok(StartFrom::Beginning),
            date => DateTime::parse_from_rfc3339(date)
                .map(StartFrom::Since)
                .map_err(|_| ConfigError::BadStartFrom(s.to_owned())),
        }
    }
}

impl TryFrom<String> for StartFrom {
    type Error = ConfigError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl fmt::Display for StartFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartFrom::Now => f.write_str("now"),
            StartFrom::Beginning => f.write_str("beginning"),
            StartFrom::Since(date) => f.write_str(&date.to_rfc3339()),
        }
    }
}

impl From<StartFrom> for String {
    fn from(value: StartFrom) -> Self {
        value.to_string()
    }
}

/// Where a mailbox started being read, as recorded when it was first seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartPoint {
    /// The `start_from` in force then (`now`, `beginning` or the date).
    pub start_from: String,
    /// The mailbox's UIDVALIDITY then.
    pub uidvalidity: u32,
    /// The first UID that could be taken; everything below it that was not named is left.
    pub first_uid: u32,
    /// How many messages present then were not taken.
    pub left_behind: u32,
    /// When the start was decided.
    pub started_at: DateTime<Utc>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_forms_and_refuses_the_rest() {
        assert_eq!("now".parse::<StartFrom>().unwrap(), StartFrom::Now);
        assert_eq!(
            "beginning".parse::<StartFrom>().unwrap(),
            StartFrom::Beginning
        );
        let since: StartFrom = "2026-01-02T03:04:05Z".parse().unwrap();
        assert_eq!(since.to_string(), "2026-01-02T03:04:05+00:00");
        for bad in ["", "yesterday", "2026-01-02", "Beginning"] {
            assert!(
                matches!(bad.parse::<StartFrom>(), Err(ConfigError::BadStartFrom(_))),
                "{bad}"
            );
        }
    }
}
