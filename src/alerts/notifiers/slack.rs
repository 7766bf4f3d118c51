//! The Slack notifier: `chat.postMessage` through slack-morphism's Web API client with the
//! bot token, and on resolve `chat.update` of the message the firing posted (its channel and
//! `ts` are the notification's external reference), so the channel shows one message per
//! episode whose state changes.

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use slack_morphism::prelude::*;

use super::message::Message;
use crate::config::notifiers::SlackNotifierConfig;

type Connector = SlackClientHyperConnector<HttpsConnector<HttpConnector>>;

pub struct SlackSender {
    client: SlackClient<Connector>,
    token: SlackApiToken,
    channel: SlackChannelId,
}

impl SlackSender {
    pub fn new(config: &SlackNotifierConfig, token: &str) -> Result<Self, String> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .map_err(|error| error.to_string())?
            // Plain http only where the config allowed it: a loopback `api_base_url`.
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let connector = SlackClientHyperConnector::with_connector(https)
            .with_slack_api_url(config.api_base_url.trim_end_matches('/'));
        Ok(Self {
            client: SlackClient::new(connector),
            token: SlackApiToken::new(SlackApiTokenValue(token.to_owned())),
            channel: SlackChannelId(config.channel.clone()),
        })
    }

    /// Posts the message, or updates `previous` (`channel ts`) on resolve; the message's
    /// `channel ts`.
    pub async fn send(
        &self,
        message: &Message<'_>,
        previous: Option<&str>,
    ) -> Result<String, String> {
        let session = self.client.open_session(&self.token);
        let content = SlackMessageContent::new().with_text(message.text());
        let earlier = previous.and_then(|p| p.split_once(' '));
        let (channel, ts) = match earlier {
            Some((channel, ts)) if message.resolved() => {
                let request = SlackApiChatUpdateRequest::new(
                    SlackChannelId(channel.to_owned()),
                    content,
                    SlackTs(ts.to_owned()),
                );
                let answer = session
                    .chat_update(&request)
                    .await
                    .map_err(|e| e.to_string())?;
                (answer.channel, answer.ts)
            }
            _ => {
                let request = SlackApiChatPostMessageRequest::new(self.channel.clone(), content);
                let answer = session
                    .chat_post_message(&request)
                    .await
                    .map_err(|e| e.to_string())?;
                (answer.channel, answer.ts)
            }
        };
        Ok(format!("{} {}", channel.0, ts.0))
    }
}
