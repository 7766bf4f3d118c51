//! NATS JetStream: a `nats-server` of the test's own, and each run published once.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use async_nats::jetstream;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, ReplayPolicy, pull};
use futures::StreamExt as _;

use super::super::harness::{in_ci, skipped};
use super::*;

/// A `nats-server` of this test's own, on a fixed port and store, so it can be killed and
/// restarted without disturbing anyone else.
#[derive(Debug)]
struct NatsServer {
    binary: PathBuf,
    port: u16,
    store: tempfile::TempDir,
    child: Option<Child>,
}

impl NatsServer {
    fn binary() -> Option<PathBuf> {
        let installed = Path::new("/usr/sbin/nats-server");
        if installed.exists() {
            return Some(installed.to_owned());
        }
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("nats-server"))
                .find(|candidate| candidate.exists())
        })
    }

    async fn start() -> Option<NatsServer> {
        let Some(binary) = NatsServer::binary() else {
            assert!(!in_ci(), "CI=true but nats-server is not installed");
            skipped("SKIPPED NATS dispatch test: nats-server is not installed");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut server = NatsServer {
            binary,
            port,
            store: tempfile::tempdir().expect("store dir"),
            child: None,
        };
        server.spawn().await;
        Some(server)
    }

    async fn spawn(&mut self) {
        let child = Command::new(&self.binary)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nats-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // `$JS.API.INFO` answers without an error once JetStream is up. (Read as JSON:
            // async-nats' `query_account` expects fields a 2.9 server does not send.)
            if let Ok(client) = async_nats::connect(self.url()).await
                && let Ok(answer) = client.request("$JS.API.INFO", Bytes::new()).await
                && serde_json::from_slice::<Value>(&answer.payload)
                    .is_ok_and(|info| info.get("error").is_none())
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nats-server on port {} did not start JetStream in 20 s",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Every message of `stream`, read through a new ephemeral pull consumer (deliver all, no
/// acks), until `expected` have arrived; then the stream's own message count.
async fn read_stream(url: &str, stream: &str, expected: usize) -> (Vec<async_nats::Message>, u64) {
    let client = async_nats::connect(url).await.expect("connect to nats");
    let mut stream = jetstream::new(client)
        .get_stream(stream)
        .await
        .expect("the stream");
    let consumer = stream
        .create_consumer(pull::Config {
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::None,
            replay_policy: ReplayPolicy::Instant,
            ..Default::default()
        })
        .await
        .expect("create a consumer");
    let mut delivered = consumer.messages().await.expect("consume the stream");
    let mut messages = Vec::with_capacity(expected);
    let deadline = Instant::now() + Duration::from_secs(30);
    while messages.len() < expected {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = tokio::time::timeout(left, delivered.next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the consumer got {} of {expected} messages in 30 s",
                    messages.len()
                )
            })
            .expect("the consumer's messages ended")
            .expect("read from nats");
        messages.push(message.message);
    }
    let stored = stream.info().await.expect("stream info").state.messages;
    (messages, stored)
}

/// The value of header `name` on `message`, if it has one.
fn header<'a>(message: &'a async_nats::Message, name: &str) -> Option<&'a str> {
    message
        .headers
        .as_ref()
        .and_then(|headers| headers.get(name))
        .map(|value| value.as_str())
}

/// Checks that the stream holds each run of `runs` exactly once, under its dispatch id.
async fn assert_each_run_once(
    daemon: &Daemon,
    url: &str,
    stream: &str,
    runs: &BTreeSet<String>,
) -> BTreeMap<String, Value> {
    let (messages, stored) = read_stream(url, stream, runs.len()).await;
    assert_eq!(
        stored,
        runs.len() as u64,
        "the stream stores {stored} messages for {} runs",
        runs.len()
    );
    let mut by_msg_id = BTreeMap::new();
    for message in &messages {
        let msg_id = header(message, "Nats-Msg-Id")
            .unwrap_or_else(|| panic!("no Nats-Msg-Id on {message:?}"))
            .to_owned();
        assert_eq!(
            message.subject.as_str(),
            "runs.acme.triage",
            "the subject template"
        );
        assert_eq!(
            header(message, "Content-Type"),
            Some("application/cloudevents+json")
        );
        let body: Value = serde_json::from_slice(&message.payload).expect("a JSON body");
        assert_eq!(body["id"], msg_id.as_str(), "Nats-Msg-Id is the body id");
        assert_eq!(body["type"], "switchyard.run.start");
        let previous = by_msg_id.insert(msg_id.clone(), body);
        assert!(previous.is_none(), "Nats-Msg-Id {msg_id} arrived twice");
    }
    let mut by_run = BTreeMap::new();
    for body in by_msg_id.values() {
        let run = body["data"]["run"]["id"].as_str().unwrap_or_default();
        assert!(runs.contains(run), "a message for an unknown run: {body:#}");
        by_run.insert(run.to_owned(), body["id"].clone());
    }
    assert_eq!(by_run.len(), runs.len(), "every run has its message");
    let mut trails = BTreeMap::new();
    for run in runs {
        let trail = daemon.get(&format!("/v1/runs/{run}")).await;
        assert_eq!(
            trail["dispatch"]["id"], by_run[run],
            "the message of run {run} carries another id than its dispatch: {trail:#}"
        );
        assert_eq!(trail["status"], "dispatched", "{trail:#}");
        trails.insert(run.clone(), trail);
    }
    trails
}

#[tokio::test]
async fn runs_published_to_jetstream_arrive_once_each_by_msg_id() {
    let Some(mut nats) = NatsServer::start().await else {
        return;
    };
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let stream = format!("RUNS_{}", uuid::Uuid::now_v7().simple());
    let setup = format!(
        "[[target]]\nname = \"worker\"\nkind = \"nats\"\nurl = \"{}\"\n\
         subject = \"runs.{{tenant}}.{{workflow}}\"\nstream = \"{stream}\"\ncreate_stream = true\n\
         retry = [\"200ms\", \"500ms\", \"1s\", \"1s\", \"2s\", \"2s\", \"2s\"]\n{WORKFLOW}",
        nats.url()
    );
    let daemon = Daemon::start(&db, &config(&db, &setup), &[]).await;

    let entities: Vec<String> = (0..200).map(|n| unique(&format!("e{n}"))).collect();
    let posted = AtomicUsize::new(0);
    let first: BTreeSet<String> = post_many(&daemon, &entities, 20, &posted)
        .await
        .into_iter()
        .collect();
    assert_eq!(first.len(), 200, "200 distinct runs");
    wait_all_dispatched(&daemon, &first, Duration::from_secs(60)).await;
    assert_each_run_once(&daemon, &nats.url(), &stream, &first).await;

    // nats-server dies while 200 more arrive and comes back on the same port and store.
    let entities: Vec<String> = (0..200).map(|n| unique(&format!("f{n}"))).collect();
    let posted = AtomicUsize::new(0);
    let (second, ()) = tokio::join!(post_many(&daemon, &entities, 10, &posted), async {
        let deadline = Instant::now() + Duration::from_secs(60);
        while posted.load(Ordering::SeqCst) < 40 {
            assert!(Instant::now() < deadline, "posting stalled");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        nats.kill();
        // Longer than the transport waits for a reconnect (2 s), so attempts fail and retry.
        tokio::time::sleep(Duration::from_secs(3)).await;
        nats.spawn().await;
    });
    let second: BTreeSet<String> = second.into_iter().collect();
    let all: BTreeSet<String> = first.union(&second).cloned().collect();
    assert_eq!(all.len(), 400);
    wait_all_dispatched(&daemon, &all, Duration::from_secs(90)).await;
    let trails = assert_each_run_once(&daemon, &nats.url(), &stream, &all).await;
    let retried = second
        .iter()
        .filter(|run| {
            trails[*run]["attempts"]
                .as_array()
                .is_some_and(|a| a.iter().any(|a| a["result"] == "retry"))
        })
        .count();
    assert!(
        retried > 0,
        "no run of the second batch met the outage: the test did not test it"
    );

    daemon.stop();
    nats.kill();
}
