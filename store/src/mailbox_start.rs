//! Where mailboxes started being read and the refresh tokens their OAuth2 providers rotated
//! to. Invariant: a start is written only together with the mailbox's first cursor (never over
//! an existing cursor), a skip never moves a cursor backwards or across a UIDVALIDITY, and a
//! stored refresh token is answered only for the configured token it grew from.

use sea_orm::sea_query::OnConflict;
use sea_orm::{ActiveValue::Set, ColumnTrait, DbErr, EntityTrait, QueryFilter};

use crate::Store;
use crate::entities::{mailbox_cursor, mailbox_oauth_token, mailbox_start};
use crate::runs::begin_write;

impl Store {
    /// Gives a mailbox without a cursor its first one, `(start.uidvalidity, start.first_uid -
    /// 1)`, and records `start`, in one transaction. False (nothing written) when the mailbox
    /// has a cursor already, e.g. another replica started it first.
    pub async fn start_mailbox(&self, start: mailbox_start::Model) -> Result<bool, DbErr> {
        let txn = begin_write(self.db()).await?;
        let existing =
            mailbox_cursor::Entity::find_by_id((start.source.clone(), start.mailbox.clone()))
                .one(&txn)
                .await?;
        if existing.is_some() {
            return Ok(false);
        }
        let inserted = mailbox_cursor::Entity::insert(mailbox_cursor::ActiveModel {
            source: Set(start.source.clone()),
            mailbox: Set(start.mailbox.clone()),
            uidvalidity: Set(start.uidvalidity),
            last_uid: Set((start.first_uid - 1).max(0)),
            updated_at: Set(start.started_at),
        })
        .exec_without_returning(&txn)
        .await;
        match inserted {
            Ok(_) => {}
            // Another replica inserted it between our read and insert.
            Err(error) if error.sql_err().is_some() => return Ok(false),
            Err(error) => return Err(error),
        }
        mailbox_start::Entity::insert(mailbox_start::ActiveModel::from(start))
            .on_conflict(
                OnConflict::columns([
                    mailbox_start::Column::Source,
                    mailbox_start::Column::Mailbox,
                ])
                .update_columns([
                    mailbox_start::Column::StartFrom,
                    mailbox_start::Column::Uidvalidity,
                    mailbox_start::Column::FirstUid,
                    mailbox_start::Column::LeftBehind,
                    mailbox_start::Column::StartedAt,
                ])
                .to_owned(),
            )
            .exec_without_returning(&txn)
            .await?;
        txn.commit().await.map(|()| true)
    }

    /// Where the mailbox started being read, if its start was recorded.
    pub async fn mailbox_start(
        &self,
        source: &str,
        mailbox: &str,
    ) -> Result<Option<mailbox_start::Model>, DbErr> {
        mailbox_start::Entity::find_by_id((source.to_owned(), mailbox.to_owned()))
            .one(self.db())
            .await
    }

    /// Moves the cursor of `(source, mailbox)` forward to `last_uid` without a delivery; only
    /// under the same `uidvalidity` and only forward. Whether it moved.
    pub async fn skip_mailbox_cursor(
        &self,
        source: &str,
        mailbox: &str,
        uidvalidity: i64,
        last_uid: i64,
        now: i64,
    ) -> Result<bool, DbErr> {
        let moved = mailbox_cursor::Entity::update_many()
            .col_expr(mailbox_cursor::Column::LastUid, last_uid.into())
            .col_expr(mailbox_cursor::Column::UpdatedAt, now.into())
            .filter(mailbox_cursor::Column::Source.eq(source))
            .filter(mailbox_cursor::Column::Mailbox.eq(mailbox))
            .filter(mailbox_cursor::Column::Uidvalidity.eq(uidvalidity))
            .filter(mailbox_cursor::Column::LastUid.lt(last_uid))
            .exec(self.db())
            .await?;
        Ok(moved.rows_affected > 0)
    }

    /// The refresh token stored for `source`, if it grew from the configured token with
    /// `seed_fingerprint` (a newly configured token makes the stored one moot).
    pub async fn mailbox_refresh_token(
        &self,
        source: &str,
        seed_fingerprint: &str,
    ) -> Result<Option<String>, DbErr> {
        Ok(mailbox_oauth_token::Entity::find_by_id(source)
            .one(self.db())
            .await?
            .filter(|row| row.seed_fingerprint == seed_fingerprint)
            .map(|row| row.refresh_token))
    }

    /// Keeps `refresh_token` as the newest of `source` (replacing any stored one).
    pub async fn store_mailbox_refresh_token(
        &self,
        source: &str,
        seed_fingerprint: &str,
        refresh_token: &str,
        now: i64,
    ) -> Result<(), DbErr> {
        mailbox_oauth_token::Entity::insert(mailbox_oauth_token::ActiveModel {
            source: Set(source.to_owned()),
            seed_fingerprint: Set(seed_fingerprint.to_owned()),
            refresh_token: Set(refresh_token.to_owned()),
            updated_at: Set(now),
        })
        .on_conflict(
            OnConflict::column(mailbox_oauth_token::Column::Source)
                .update_columns([
                    mailbox_oauth_token::Column::SeedFingerprint,
                    mailbox_oauth_token::Column::RefreshToken,
                    mailbox_oauth_token::Column::UpdatedAt,
                ])
                .to_owned(),
        )
        .exec_without_returning(self.db())
        .await
        .map(|_| ())
    }
}
