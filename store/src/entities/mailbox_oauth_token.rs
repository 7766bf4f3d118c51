//! The newest refresh token an OAuth2 provider rotated to for a mailbox source, and the
//! fingerprint of the configured token it grew from.

use sea_orm::entity::prelude::*;

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "mailbox_oauth_tokens")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub source: String,
    pub seed_fingerprint: String,
    pub refresh_token: String,
    pub updated_at: i64,
}

// The token is a secret: never in a log line.
impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MailboxOauthToken")
            .field("source", &self.source)
            .field("seed_fingerprint", &self.seed_fingerprint)
            .field("updated_at", &self.updated_at)
            .finish_non_exhaustive()
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
