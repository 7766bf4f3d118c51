//! Records the commit the daemon is built from, for `switchyard --version`.
//!
//! Invariant: the build script watches only files that exist. Cargo reruns a build script whose
//! watched file is missing on every build, and with it recompiles the daemon crate: a fresh
//! clone has no `.git/packed-refs`, and a worktree's `.git` is a file, not a directory.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|output| output.status.success())
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty())
}

fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=SWITCHYARD_COMMIT={commit}");
    // Without git (a source tarball) nothing moves the commit: watch the build script alone.
    println!("cargo:rerun-if-changed=build.rs");
    let (Some(git_dir), Some(common_dir)) = (
        git(&["rev-parse", "--git-dir"]).map(PathBuf::from),
        git(&["rev-parse", "--git-common-dir"]).map(PathBuf::from),
    ) else {
        return;
    };
    // HEAD (per worktree) names the branch; the branch's ref file, or packed-refs where the
    // refs are packed (shared by every worktree), moves with each commit.
    let head = git_dir.join("HEAD");
    watch(&head);
    if let Ok(text) = std::fs::read_to_string(&head)
        && let Some(branch) = text.trim().strip_prefix("ref: ")
    {
        watch(&common_dir.join(branch));
    }
    watch(&common_dir.join("packed-refs"));
}
