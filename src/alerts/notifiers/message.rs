//! What a notification says, whatever carries it: what fired (rule, kind, scope, summary),
//! since when, the numbers behind it, and where to look (the console's alerts page).

use serde_json::{Value, json};
use switchyard_store::entities::alert;
use switchyard_store::{millis_rfc3339, now_millis};

use crate::config::Settings;

/// One notification's content.
#[derive(Debug)]
pub struct Message<'a> {
    /// The notification's id: the same on every retry.
    pub id: &'a str,
    pub alert: &'a alert::Model,
    /// `fired` or `resolved`.
    pub event: &'a str,
    /// The console page of this alert.
    pub link: String,
}

/// The console's base URL as operators reach it.
pub fn console_url(settings: &Settings) -> String {
    let config = &settings.loaded.config;
    config
        .alerting
        .console_url
        .clone()
        .unwrap_or_else(|| format!("http://{}/ui", config.server.listen))
}

impl<'a> Message<'a> {
    pub fn new(id: &'a str, alert: &'a alert::Model, event: &'a str, console: &str) -> Self {
        Self {
            id,
            alert,
            event,
            link: format!("{}/alerts#{}", console.trim_end_matches('/'), alert.id),
        }
    }

    pub fn resolved(&self) -> bool {
        self.event != switchyard_store::alerts::FIRED
    }

    /// One line: `[FIRING] rule (scope): summary`.
    pub fn title(&self) -> String {
        let word = if self.resolved() {
            "RESOLVED"
        } else {
            "FIRING"
        };
        let scope = if self.alert.scope.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.alert.scope)
        };
        format!(
            "[{word}] {}{scope}: {}",
            self.alert.rule, self.alert.summary
        )
    }

    fn numbers(&self) -> Value {
        serde_json::from_str(&self.alert.numbers).unwrap_or(Value::Null)
    }

    /// The plain-text body (Slack and email).
    pub fn text(&self) -> String {
        let alert = self.alert;
        let mut text = format!(
            "{}\n\nkind: {}\nsince: {}\nfired at: {}\n",
            self.title(),
            alert.kind,
            millis_rfc3339(alert.since),
            millis_rfc3339(alert.fired_at)
        );
        if let Some(at) = alert.resolved_at.filter(|_| self.resolved()) {
            text.push_str(&format!("resolved at: {}\n", millis_rfc3339(at)));
        }
        if let Value::Object(numbers) = self.numbers() {
            for (key, value) in numbers {
                text.push_str(&format!("{key}: {value}\n"));
            }
        }
        text.push_str(&format!("\nConsole: {}\n", self.link));
        text
    }

    /// The webhook body: a CloudEvents 1.0 JSON envelope, like dispatch's run messages.
    pub fn cloudevent(&self) -> Value {
        let id = self.id;
        let alert = self.alert;
        json!({
            "specversion": "1.0",
            "id": id,
            "source": "switchyard/alerts",
            "type": format!("switchyard.alert.{}", self.event),
            "time": millis_rfc3339(now_millis()),
            "datacontenttype": "application/json",
            "subject": alert.id,
            "data": {
                "alert_id": alert.id,
                "rule": alert.rule,
                "kind": alert.kind,
                "scope": alert.scope,
                "tenant_id": alert.tenant_id,
                "state": if self.resolved() { "resolved" } else { "firing" },
                "episode": alert.episode,
                "summary": alert.summary,
                "numbers": self.numbers(),
                "since": millis_rfc3339(alert.since),
                "fired_at": millis_rfc3339(alert.fired_at),
                "resolved_at": alert.resolved_at.map(millis_rfc3339),
                "console_url": self.link,
            }
        })
    }
}
