//! Schedules: each schedule of the revision in force that the viewer's tenants may see, with
//! its timing, its latest recorded fire (outcome, and the run it made) and its next fire.

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;

use super::session::Viewer;
use super::{Chrome, ConsoleError, render};
use crate::config::Scope;
use crate::http::AppState;
use crate::schedule_status::{ScheduleStatus, statuses};

pub fn router() -> Router<AppState> {
    Router::new().route("/ui/schedules", get(page))
}

#[derive(askama::Template)]
#[template(path = "schedules.html")]
struct Page {
    chrome: Chrome,
    schedules: Vec<ScheduleStatus>,
}

impl Page {
    fn timing(schedule: &ScheduleStatus) -> String {
        match (&schedule.cron, &schedule.every) {
            (Some(cron), _) => cron.clone(),
            (None, Some(every)) => format!("every {every}"),
            (None, None) => String::new(),
        }
    }
}

async fn page(viewer: Viewer, State(state): State<AppState>) -> Result<Response, ConsoleError> {
    viewer.require(Scope::Read)?;
    let live = state.live.current();
    let schedules = statuses(
        &state.store,
        &live.settings.loaded.config.schedules,
        |tenant| viewer.principal.sees(tenant),
        chrono::Utc::now(),
    )
    .await?;
    let page = Page {
        chrome: viewer.chrome("schedules"),
        schedules,
    };
    Ok(render(&page))
}
