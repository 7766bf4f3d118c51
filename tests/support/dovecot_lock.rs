//! The one Dovecot that `.ci/dovecot.sh` starts, locked between tests: a test that stops or
//! restarts it holds the lock alone ([`exclusive`]), every other test that uses it shares it
//! ([`shared`]).
//!
//! It is an `flock` on one file in the temporary directory, not a lock in memory, so it holds
//! between test binaries and processes (cargo-nextest runs each test in a process of its own,
//! tests of several binaries at once) as well as between the tests of one process: `flock` locks
//! taken through separate opens of a file exclude each other within a process too. Dropping the
//! guard closes the file, which unlocks it. Every test crate that uses that Dovecot includes this
//! file (`#[path]`), so all of them take the same lock.

use std::fs::{File, OpenOptions};

/// Held while a test uses (or has stopped) the shared Dovecot.
#[derive(Debug)]
pub struct DovecotLock(#[allow(dead_code)] File);

/// Shares the Dovecot with every other test that does not stop it.
pub async fn shared() -> DovecotLock {
    lock(false).await
}

/// Holds the Dovecot alone (to stop or restart it), once no other test uses it.
pub async fn exclusive() -> DovecotLock {
    lock(true).await
}

async fn lock(exclusive: bool) -> DovecotLock {
    tokio::task::spawn_blocking(move || {
        let path = std::env::temp_dir().join("switchyard-test-dovecot.lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        let locked = if exclusive {
            file.lock()
        } else {
            file.lock_shared()
        };
        locked.unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
        DovecotLock(file)
    })
    .await
    .expect("the Dovecot lock's task")
}
