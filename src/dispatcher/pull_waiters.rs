//! Pull workers long-polling `POST /v1/claims`, registered by the workflows they claim: new
//! work of a workflow wakes as many of that workflow's waiters as it made claimable runs, never
//! the waiters of other workflows (and so never another tenant's).
//!
//! Work nobody wakes them for (runs another replica routed, a claim that lapsed) waiters find
//! by a periodic look, made for each workflow by one of its waiters at a time, not by each.
//!
//! Invariant: a wake-up is never lost. A waiter registers before its first look, a wake-up
//! that arrives while it looks is kept for its next wait, and one it leaves with unused (its
//! request ended, or it took as many runs as it asked for, so more may be due) is passed on
//! to other waiters of its workflows.
//!
//! When the daemon stops, every waiter is woken and told so ([`PullWaiters::close`]): a
//! waiting claim answers at once instead of holding its connection through the shutdown drain,
//! and no claim request waits after that.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Every waiting claim request of one daemon, by workflow and by token.
#[derive(Debug, Default)]
pub struct PullWaiters {
    registry: Mutex<Registry>,
    /// Set once, under the registry's lock, when the daemon stops.
    closed: AtomicBool,
}

#[derive(Debug, Default)]
struct Registry {
    next_id: u64,
    /// Waiters of each workflow, oldest first.
    by_workflow: HashMap<String, BTreeMap<u64, Arc<Waiter>>>,
    /// Waiting requests per token name.
    by_token: HashMap<String, usize>,
    /// When each waited-on workflow was last looked at periodically.
    looked: HashMap<String, Instant>,
}

#[derive(Debug)]
struct Waiter {
    /// Set by a wake-up, cleared when the waiter looks (claims).
    woken: AtomicBool,
    /// Wakes the one task that waits on this waiter.
    notify: Notify,
    workflows: Vec<String>,
}

/// Why a claim request may not wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CannotWait {
    /// Its token already has `cap` waiting claim requests.
    AtCap { cap: usize },
    /// The daemon is stopping.
    Closed,
}

impl PullWaiters {
    /// Registers a waiting claim request of `token` for `workflows` (distinct names), unless
    /// the token already has `cap` waiting or the daemon is stopping. Unregistered when the
    /// returned guard is dropped.
    pub fn wait_on(
        &self,
        token: &str,
        workflows: Vec<String>,
        cap: usize,
    ) -> Result<Waiting<'_>, CannotWait> {
        let mut registry = self.lock();
        if self.closed.load(Ordering::Acquire) {
            return Err(CannotWait::Closed);
        }
        let waiting = registry.by_token.entry(token.to_owned()).or_default();
        if *waiting >= cap {
            return Err(CannotWait::AtCap { cap });
        }
        *waiting += 1;
        let count = *waiting;
        registry.next_id += 1;
        let id = registry.next_id;
        let waiter = Arc::new(Waiter {
            woken: AtomicBool::new(false),
            notify: Notify::new(),
            workflows,
        });
        for workflow in &waiter.workflows {
            registry
                .by_workflow
                .entry(workflow.clone())
                .or_default()
                .insert(id, waiter.clone());
        }
        // Set under the lock, so the gauge never goes back to an older count.
        crate::metrics::metrics().pull_waiting(token, count);
        drop(registry);
        Ok(Waiting {
            waiters: self,
            id,
            waiter,
            token: token.to_owned(),
        })
    }

    /// Each of `workflows` (one entry per new claimable run) may have a run for a waiter:
    /// wakes that many waiters of it that are not awake already.
    pub fn work_for<'a>(&self, workflows: impl IntoIterator<Item = &'a str>) {
        let mut runs: HashMap<&str, usize> = HashMap::new();
        for workflow in workflows {
            *runs.entry(workflow).or_default() += 1;
        }
        let registry = self.lock();
        for (workflow, count) in runs {
            if let Some(waiters) = registry.by_workflow.get(workflow) {
                wake(waiters.values(), count);
            }
        }
    }

    /// The daemon is stopping: wakes every waiter, each of which then sees
    /// [`Waiting::closed`], and refuses every later [`PullWaiters::wait_on`].
    pub fn close(&self) {
        let registry = self.lock();
        self.closed.store(true, Ordering::Release);
        for waiters in registry.by_workflow.values() {
            wake(waiters.values(), usize::MAX);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Wakes up to `count` of `waiters` that are not awake already.
fn wake<'a>(waiters: impl Iterator<Item = &'a Arc<Waiter>>, count: usize) {
    let mut woken = 0;
    for waiter in waiters {
        if woken == count {
            break;
        }
        if !waiter.woken.swap(true, Ordering::AcqRel) {
            waiter.notify.notify_waiters();
            woken += 1;
        }
    }
}

/// One registered waiting claim request.
#[derive(Debug)]
pub struct Waiting<'a> {
    waiters: &'a PullWaiters,
    id: u64,
    waiter: Arc<Waiter>,
    token: String,
}

impl Waiting<'_> {
    /// Called before each look: whether a wake-up came since the last one. A wake-up that
    /// comes during the look is kept for the next [`Waiting::woken`].
    pub fn take_wake(&self) -> bool {
        self.waiter.woken.swap(false, Ordering::AcqRel)
    }

    /// Waits up to `timeout` for a wake-up; whether one came.
    pub async fn woken(&self, timeout: Duration) -> bool {
        let notified = self.waiter.notify.notified();
        tokio::pin!(notified);
        // Enabled before the flag is read: a wake-up between the two still wakes this wait.
        notified.as_mut().enable();
        if self.waiter.woken.load(Ordering::Acquire) {
            return true;
        }
        tokio::time::timeout(timeout, notified).await.is_ok()
    }

    /// Whether the daemon is stopping: the request should answer with what it has.
    pub fn closed(&self) -> bool {
        self.waiters.closed.load(Ordering::Acquire)
    }

    /// Those of this waiter's workflows that no waiter looked at periodically within `every`,
    /// marked as looked at now: what this waiter's periodic look should read.
    pub fn to_look_at(&self, every: Duration) -> Vec<String> {
        let now = Instant::now();
        let mut registry = self.waiters.lock();
        let mut due = Vec::new();
        for workflow in &self.waiter.workflows {
            let last = registry.looked.entry(workflow.clone()).or_insert(now);
            if *last == now || now.duration_since(*last) >= every {
                *last = now;
                due.push(workflow.clone());
            }
        }
        due
    }

    /// This waiter took as many runs as it asked for, so more may be due: wakes one other
    /// waiter of each of its workflows.
    pub fn pass_on(&self) {
        let registry = self.waiters.lock();
        pass_on(&registry, self.id, &self.waiter.workflows);
    }
}

fn pass_on(registry: &Registry, from: u64, workflows: &[String]) {
    for workflow in workflows {
        if let Some(waiters) = registry.by_workflow.get(workflow) {
            wake(
                waiters
                    .iter()
                    .filter(|(id, _)| **id != from)
                    .map(|(_, w)| w),
                1,
            );
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut registry = self.waiters.lock();
        for workflow in &self.waiter.workflows {
            if let Some(waiters) = registry.by_workflow.get_mut(workflow) {
                waiters.remove(&self.id);
                if waiters.is_empty() {
                    registry.by_workflow.remove(workflow);
                    registry.looked.remove(workflow);
                }
            }
        }
        let left = match registry.by_token.get_mut(&self.token) {
            Some(count) if *count > 1 => {
                *count -= 1;
                *count
            }
            _ => {
                registry.by_token.remove(&self.token);
                0
            }
        };
        // A wake-up this request did not look for goes to a waiter that will.
        if self.waiter.woken.load(Ordering::Acquire) {
            pass_on(&registry, self.id, &self.waiter.workflows);
        }
        crate::metrics::metrics().pull_waiting(&self.token, left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[tokio::test]
    async fn a_run_wakes_only_waiters_of_its_workflow_one_per_run() {
        let waiters = PullWaiters::default();
        let a1 = waiters.wait_on("t", names(&["a"]), 10).expect("a1");
        let a2 = waiters.wait_on("t", names(&["a"]), 10).expect("a2");
        let b = waiters.wait_on("u", names(&["b"]), 10).expect("b");
        waiters.work_for(["a"]);
        assert!(a1.woken(Duration::ZERO).await, "the oldest waiter of `a`");
        assert!(!a2.woken(Duration::ZERO).await, "one run wakes one waiter");
        assert!(!b.woken(Duration::ZERO).await, "another workflow's waiter");
        // A second run wakes the next waiter, not the one already awake.
        waiters.work_for(["a", "c"]);
        assert!(a2.woken(Duration::ZERO).await);
        assert!(!b.woken(Duration::ZERO).await);
    }

    #[tokio::test]
    async fn a_wake_up_during_a_look_is_kept_and_an_unused_one_is_passed_on() {
        let waiters = PullWaiters::default();
        let first = waiters.wait_on("t", names(&["a", "b"]), 10).expect("first");
        let second = waiters.wait_on("t", names(&["b"]), 10).expect("second");
        assert!(!first.take_wake());
        waiters.work_for(["b"]);
        // Woken while "looking": the next wait returns at once.
        assert!(first.woken(Duration::from_secs(5)).await);
        assert!(!second.woken(Duration::ZERO).await);
        // Leaving without looking again hands the wake-up to the other waiter of `b`.
        drop(first);
        assert!(second.woken(Duration::ZERO).await);
        assert!(second.take_wake());
        second.pass_on();
        assert!(
            !second.woken(Duration::ZERO).await,
            "no other waiter to pass to"
        );
    }

    #[tokio::test]
    async fn a_wait_is_woken_while_it_waits() {
        let waiters = Arc::new(PullWaiters::default());
        let waker = waiters.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            waker.work_for(["a"]);
        });
        let waiting = waiters.wait_on("t", names(&["a"]), 10).expect("waiting");
        assert!(waiting.woken(Duration::from_secs(10)).await);
        task.await.expect("task");
    }

    #[tokio::test]
    async fn a_workflow_is_looked_at_by_one_waiter_per_period() {
        let waiters = PullWaiters::default();
        let first = waiters.wait_on("t", names(&["a", "b"]), 10).expect("first");
        let second = waiters.wait_on("t", names(&["a"]), 10).expect("second");
        let every = Duration::from_millis(300);
        assert_eq!(first.to_look_at(every), names(&["a", "b"]));
        assert!(
            second.to_look_at(every).is_empty(),
            "`a` was just looked at"
        );
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert_eq!(second.to_look_at(every), names(&["a"]));
        assert_eq!(first.to_look_at(every), names(&["b"]));
        drop((first, second));
        assert!(waiters.lock().looked.is_empty());
    }

    #[test]
    fn a_token_gets_at_most_its_cap_of_waiting_requests() {
        let waiters = PullWaiters::default();
        let held: Vec<_> = (0..3)
            .map(|_| {
                waiters
                    .wait_on("t", names(&["a"]), 3)
                    .expect("under the cap")
            })
            .collect();
        assert_eq!(
            waiters.wait_on("t", names(&["a"]), 3).err(),
            Some(CannotWait::AtCap { cap: 3 })
        );
        assert!(waiters.wait_on("u", names(&["a"]), 3).is_ok(), "per token");
        drop(held);
        assert!(waiters.wait_on("t", names(&["a"]), 3).is_ok());
        assert!(waiters.lock().by_workflow.is_empty());
    }

    #[tokio::test]
    async fn closing_wakes_every_waiter_and_refuses_new_ones() {
        let waiters = Arc::new(PullWaiters::default());
        let a = waiters.wait_on("t", names(&["a"]), 10).expect("a");
        let ab = waiters.wait_on("u", names(&["a", "b"]), 10).expect("ab");
        assert!(!a.closed());
        let closer = waiters.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            closer.close();
        });
        // Waits far longer than the test runs: only the close ends them.
        assert!(a.woken(Duration::from_secs(600)).await, "a waiter of `a`");
        assert!(ab.woken(Duration::from_secs(600)).await, "all of them");
        assert!(a.closed() && ab.closed());
        task.await.expect("task");
        assert_eq!(
            waiters.wait_on("v", names(&["c"]), 10).err(),
            Some(CannotWait::Closed),
            "no request waits once the daemon is stopping"
        );
    }
}
