//! Tells a service manager (systemd's `Type=notify`) where the daemon is in its life: ready,
//! reloading, stopping, and a one-line status for `systemctl status`.
//!
//! Invariant: a no-op when `NOTIFY_SOCKET` is unset; never fails the daemon. A message that
//! cannot be sent is logged at debug level and dropped: the service manager is an observer here,
//! not a dependency.

use sd_notify::NotifyState;

/// Longest status line sent; `systemctl status` shows one line, and a datagram is not a log.
const STATUS_MAX_CHARS: usize = 200;

/// Startup is finished (or a reload is over): the daemon answers on its listener.
pub fn ready(status: &str) {
    let status = one_line(status);
    send(&[NotifyState::Ready, NotifyState::Status(&status)]);
}

/// A reload begins. systemd wants the monotonic clock with it, to tell this reload from an
/// older one; without a readable clock, RELOADING=1 alone still says what is happening.
pub fn reloading(status: &str) {
    let status = one_line(status);
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now, NotifyState::Status(&status)]),
        Err(error) => {
            tracing::debug!(%error, "cannot read the monotonic clock for RELOADING=1");
            send(&[NotifyState::Reloading, NotifyState::Status(&status)]);
        }
    }
}

/// Shutdown begins.
pub fn stopping(status: &str) {
    let status = one_line(status);
    send(&[NotifyState::Stopping, NotifyState::Status(&status)]);
}

/// A new status line, with no change of state.
pub fn status(text: &str) {
    let text = one_line(text);
    send(&[NotifyState::Status(&text)]);
}

fn send(states: &[NotifyState<'_>]) {
    if let Err(error) = sd_notify::notify(states) {
        tracing::debug!(%error, "cannot notify the service manager");
    }
}

/// The protocol is newline-separated assignments: a newline inside a status (an error message
/// quoting a config file, say) would end it and could start another assignment.
fn one_line(text: &str) -> String {
    let mut line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(STATUS_MAX_CHARS)
        .collect();
    if text.chars().count() > STATUS_MAX_CHARS {
        line.push('…');
    }
    line
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn a_status_stays_one_bounded_line() {
        assert_eq!(one_line("bad\nREADY=1"), "bad READY=1");
        let long = "x".repeat(500);
        assert_eq!(one_line(&long).chars().count(), super::STATUS_MAX_CHARS + 1);
    }
}
