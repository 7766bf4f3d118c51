//! A Dovecot of one test, from `.ci/dovecot.sh` in its OAuth2 mode: its own directory and
//! ports, its `oauth2` passdb asking the test's own introspection endpoint. Stopped and removed
//! when dropped.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use async_imap::Session;
use tokio::net::TcpStream;

pub struct OAuthDovecot {
    pub dir: PathBuf,
    pub port: u16,
    tls_port: u16,
    introspection_url: String,
}

pub type Client = Session<TcpStream>;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl OAuthDovecot {
    pub fn start(introspection_url: &str) -> OAuthDovecot {
        let dovecot = OAuthDovecot {
            dir: std::env::temp_dir().join(format!(
                "switchyard-dovecot-oauth-{}",
                uuid::Uuid::now_v7().simple()
            )),
            port: free_port(),
            tls_port: free_port(),
            introspection_url: introspection_url.to_owned(),
        };
        dovecot.script("start");
        dovecot
    }

    pub fn script(&self, command: &str) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/dovecot.sh");
        let output = Command::new("bash")
            .arg(script)
            .arg(command)
            .env("SWITCHYARD_DOVECOT_DIR", &self.dir)
            .env("SWITCHYARD_DOVECOT_PORT", self.port.to_string())
            .env("SWITCHYARD_DOVECOT_TLS_PORT", self.tls_port.to_string())
            .env(
                "SWITCHYARD_DOVECOT_INTROSPECTION_URL",
                &self.introspection_url,
            )
            .stdin(Stdio::null())
            .output()
            .expect("run .ci/dovecot.sh");
        assert!(
            output.status.success(),
            ".ci/dovecot.sh {command} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The test's own password session, to append mail as a mail server would deliver it.
    pub async fn client(&self) -> Client {
        let tcp = TcpStream::connect(self.addr()).await.expect("connect");
        let mut client = async_imap::Client::new(tcp);
        client
            .read_response()
            .await
            .expect("greeting")
            .expect("greeting");
        client
            .login(super::idp::USER, "secret")
            .await
            .map_err(|e| e.0)
            .expect("password login")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("dovecot.log")).unwrap_or_default()
    }
}

impl Drop for OAuthDovecot {
    fn drop(&mut self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/dovecot.sh");
        let _ = Command::new("bash")
            .arg(script)
            .arg("stop")
            .env("SWITCHYARD_DOVECOT_DIR", &self.dir)
            .env("SWITCHYARD_DOVECOT_PORT", self.port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
