//! The one Dovecot that `.ci/dovecot.sh` starts, as every test crate that uses it shares it: a
//! lock between tests, and the script that stops and starts the server. Each such crate includes
//! this file (`#[path]`), so all of them take the same lock and run the same script.
//!
//! A test that stops or restarts the server holds the lock alone ([`exclusive`]), every other
//! test that uses it shares it ([`shared`]). The lock is an `flock` on one file in the temporary
//! directory, not a lock in memory, so it holds between test binaries and processes
//! (cargo-nextest runs each test in a process of its own, tests of several binaries at once) as
//! well as between the tests of one process: `flock` locks taken through separate opens of a file
//! exclude each other within a process too. Dropping the guard closes the file, which unlocks it.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Held while a test uses (or has stopped) the shared Dovecot.
#[derive(Debug)]
pub struct DovecotLock {
    _locked: File,
}

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
        DovecotLock { _locked: file }
    })
    .await
    .expect("the Dovecot lock's task")
}

/// `.ci/dovecot.sh`, found above the including crate's folder (the repository's root, or the
/// email adapter's two levels below it).
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join(".ci/dovecot.sh"))
        .find(|script| script.exists())
        .expect(".ci/dovecot.sh above the crate's folder")
}

/// Runs `.ci/dovecot.sh <command>` (`start` or `stop`); only under [`exclusive`].
pub fn dovecot(command: &str) {
    let status = Command::new("bash")
        .arg(script())
        .arg(command)
        .stdout(Stdio::null())
        .status()
        .expect("run .ci/dovecot.sh");
    assert!(status.success(), ".ci/dovecot.sh {command} failed");
}

/// Starts Dovecot again when dropped, also when a test panics with the server stopped.
#[derive(Debug)]
pub struct StartOnDrop;

impl Drop for StartOnDrop {
    fn drop(&mut self) {
        // No assert here: panicking while unwinding would abort the whole test binary.
        let _ = Command::new("bash")
            .arg(script())
            .arg("start")
            .stdout(Stdio::null())
            .status();
    }
}
