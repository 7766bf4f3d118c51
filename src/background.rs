//! A long-running task the daemon starts once and stops at shutdown: it gets a stop signal,
//! and its shutdown waits for it within a bound (the dispatcher, retention).

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A task that runs until told to stop.
#[derive(Debug)]
pub struct Background {
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Background {
    /// Spawns `run`, handing it the receiver that turns `true` at shutdown.
    pub fn spawn<F>(run: impl FnOnce(watch::Receiver<bool>) -> F) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(stopped));
        Self {
            stop,
            task: Mutex::new(Some(task)),
        }
    }

    /// Signals the task to stop and waits for it at most `bound`; whether it stopped in time.
    pub async fn stop(&self, bound: Duration) -> bool {
        let _ = self.stop.send(true);
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        match task {
            Some(task) => tokio::time::timeout(bound, task).await.is_ok(),
            None => true,
        }
    }
}
