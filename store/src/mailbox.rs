//! Mailbox cursors and poller leases: what lets exactly one replica read each mailbox, from
//! where the last one stopped. Cursors advance in the intake writer's transaction; this module
//! reads them and manages the leases.

use crate::runs::begin_write;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QuerySelect,
};

use super::entities::{mailbox_cursor, poller_lease};
use crate::Store;

/// The stored cursor of one mailbox.
pub async fn cursor(
    db: &DatabaseConnection,
    source: &str,
    mailbox: &str,
) -> Result<Option<mailbox_cursor::Model>, DbErr> {
    mailbox_cursor::Entity::find_by_id((source.to_owned(), mailbox.to_owned()))
        .one(db)
        .await
}

/// Takes, renews or takes over (when expired or released) the poller lease of `source` for
/// `owner` until `now + ttl_ms`. Returns whether `owner` holds it afterwards.
pub async fn acquire_lease(
    db: &DatabaseConnection,
    source: &str,
    owner: &str,
    now: i64,
    ttl_ms: i64,
) -> Result<bool, DbErr> {
    let txn = begin_write(db).await?;
    let current = poller_lease::Entity::find_by_id(source)
        .lock_exclusive()
        .one(&txn)
        .await?;
    let expires_at = now.saturating_add(ttl_ms);
    let Some(lease) = current else {
        let inserted = poller_lease::Entity::insert(poller_lease::ActiveModel {
            source: Set(source.to_owned()),
            owner: Set(Some(owner.to_owned())),
            fencing_token: Set(1),
            expires_at: Set(expires_at),
        })
        .exec_without_returning(&txn)
        .await;
        return match inserted {
            Ok(_) => txn.commit().await.map(|()| true),
            // Another replica created it between our read and insert: it holds the lease.
            Err(error) if error.sql_err().is_some() => Ok(false),
            Err(error) => Err(error),
        };
    };
    let mine = lease.owner.as_deref() == Some(owner);
    let free = lease.owner.is_none() || lease.expires_at <= now;
    if !mine && !free {
        return Ok(false);
    }
    let token = if mine {
        lease.fencing_token
    } else {
        lease.fencing_token + 1
    };
    poller_lease::Entity::update_many()
        .col_expr(poller_lease::Column::Owner, Some(owner.to_owned()).into())
        .col_expr(poller_lease::Column::FencingToken, token.into())
        .col_expr(poller_lease::Column::ExpiresAt, expires_at.into())
        .filter(poller_lease::Column::Source.eq(source))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    if !mine {
        tracing::info!(
            source,
            owner,
            fencing_token = token,
            "took the mailbox poller lease"
        );
    }
    Ok(true)
}

/// Gives the lease up if `owner` holds it, so another replica can take over at once.
pub async fn release_lease(
    db: &DatabaseConnection,
    source: &str,
    owner: &str,
    now: i64,
) -> Result<(), DbErr> {
    poller_lease::Entity::update_many()
        .col_expr(poller_lease::Column::Owner, Option::<String>::None.into())
        .col_expr(poller_lease::Column::ExpiresAt, now.into())
        .filter(poller_lease::Column::Source.eq(source))
        .filter(poller_lease::Column::Owner.eq(owner))
        .exec(db)
        .await
        .map(|_| ())
}

impl Store {
    /// The stored cursor of one mailbox (where the last poll stopped).
    pub async fn mailbox_cursor(
        &self,
        source: &str,
        mailbox: &str,
    ) -> Result<Option<mailbox_cursor::Model>, DbErr> {
        cursor(self.db(), source, mailbox).await
    }

    /// Takes, renews or takes over (when expired or released) the poller lease of `source` for
    /// `owner` until `now + ttl_ms`; whether `owner` holds it afterwards. One replica holds a
    /// lease at a time, and a takeover raises its fencing token.
    pub async fn acquire_poller_lease(
        &self,
        source: &str,
        owner: &str,
        now: i64,
        ttl_ms: i64,
    ) -> Result<bool, DbErr> {
        acquire_lease(self.db(), source, owner, now, ttl_ms).await
    }

    /// Gives the poller lease of `source` up if `owner` holds it, so another replica can take
    /// over at once.
    pub async fn release_poller_lease(
        &self,
        source: &str,
        owner: &str,
        now: i64,
    ) -> Result<(), DbErr> {
        release_lease(self.db(), source, owner, now).await
    }
}
