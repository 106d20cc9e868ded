//! The page shell (head, navigation, sign-out) and the small pieces every page shares: times in
//! the configured zone, state badges, shortened text, the CSRF field, and error pages.
//!
//! Must not: fetch anything; pages pass in what they read.

use super::assets;
use crate::doctor::Verdict;
use crate::http::{ApiError, ApiState, Session};
use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use hermes_store::{InboxState, NoticeState, RunOutcome, TaskState};
use maud::{DOCTYPE, Markup, PreEscaped, html};

/// The navigation: path and label.
const NAV: &[(&str, &str)] = &[
    ("/", "Overview"),
    ("/tasks", "Tasks"),
    ("/approvals", "Approvals"),
    ("/jobs", "Jobs"),
    ("/usage", "Usage"),
    ("/deliveries", "Deliveries"),
    ("/inbox", "Inbox"),
    ("/evals", "Evals"),
    ("/memory", "Memory"),
    ("/settings", "Settings"),
];

/// What every page starts from: the daemon's state, the request's session (put there by
/// [`super::guard::require_session`]) and the path, which marks the page's navigation entry.
pub(crate) struct Ctx {
    pub state: ApiState,
    pub session: Session,
    pub path: String,
}

impl FromRequestParts<ApiState> for Ctx {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Ctx, Response> {
        let session = parts.extensions.get::<Session>().cloned().ok_or_else(|| {
            // Only a route outside `require_session` can get here: a wiring fault, not the user's.
            error_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                "This page was served without a session; please report it.",
            )
        })?;
        Ok(Ctx {
            state: state.clone(),
            session,
            path: parts.uri.path().to_string(),
        })
    }
}

impl Ctx {
    /// The zone pages show times in: the scheduler's (the user's) zone.
    pub(crate) fn tz(&self) -> Tz {
        self.state.zone()
    }

    /// A hidden field with the session's CSRF token, for every form that changes something.
    pub(crate) fn csrf(&self) -> Markup {
        html! { input type="hidden" name="csrf" value=(self.session.csrf); }
    }
}

/// A whole page: `title` in the head and as the heading, `body` under it.
pub(crate) fn render(ctx: &Ctx, title: &str, body: Markup) -> Markup {
    let zone = html! { (ctx.tz().name()) " (scheduler.timezone)" };
    render_in(ctx, title, zone, body)
}

/// [`render`], for a page whose times are in another zone (a job's own): `zone` names it.
pub(crate) fn render_in(ctx: &Ctx, title: &str, zone: Markup, body: Markup) -> Markup {
    let signed_in = !ctx.state.token.is_empty();
    let body = html! {
        (body)
        p.zone.muted { "Times are in " (zone) "." }
    };
    shell(
        title,
        Some(&ctx.path),
        html! {
            @if signed_in {
                form.signout method="post" action="/logout" {
                    (ctx.csrf())
                    button.link type="submit" { "Sign out" }
                }
            }
        },
        body,
    )
}

/// The shell without a session (sign-in, errors).
pub(super) fn shell(title: &str, current: Option<&str>, extra_nav: Markup, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                title { (title) " · hermes-agent" }
                link rel="stylesheet" href=(assets::url("app.css"));
                link rel="icon" href=(assets::url("icon.svg")) type="image/svg+xml";
                script src=(assets::url("app.js")) defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/" { "hermes" span { "-agent" } }
                    @if let Some(current) = current {
                        nav aria-label="Main" {
                            ul {
                                @for (path, label) in NAV {
                                    li {
                                        @if is_current(path, current) {
                                            a href=(path) aria-current="page" { (label) }
                                        } @else {
                                            a href=(path) { (label) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    (extra_nav)
                }
                main #main class=[current.is_none().then_some("narrow-page")] {
                    h1 { (title) }
                    (body)
                }
                footer.bottom { "hermes-agent " (env!("CARGO_PKG_VERSION")) }
            }
        }
    }
}

fn is_current(path: &str, current: &str) -> bool {
    if path == "/" {
        current == "/"
    } else {
        current == path || current.starts_with(&format!("{path}/"))
    }
}

/// An error as a page: the status, what went wrong, and a way back.
pub(crate) fn error_page(status: StatusCode, message: &str) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    let body = html! {
        p.error role="alert" { (message) }
        p { a href="/" { "Back to the overview" } }
    };
    (status, shell(title, Some(""), html! {}, body)).into_response()
}

/// Any failure of a page handler, shown as a page; internal details stay in the log (the
/// conversion to [`ApiError`] logs them).
pub(crate) struct PageError(pub ApiError);

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        error_page(self.0.status, &self.0.message)
    }
}

macro_rules! page_error_from {
    ($($t:ty),*) => {$(
        impl From<$t> for PageError {
            fn from(e: $t) -> PageError {
                PageError(ApiError::from(e))
            }
        }
    )*};
}
page_error_from!(
    hermes_store::StoreError,
    hermes_engine::agent::AgentError,
    hermes_engine::agent::ApprovalError,
    hermes_engine::scheduler::SchedulerError
);

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> PageError {
        PageError(e)
    }
}

pub(crate) type PageResult<T = Response> = Result<T, PageError>;

/// `2026-12-01 09:25` in `tz`, in a `<time>` with the exact instant.
pub(super) fn when(t: DateTime<Utc>, tz: Tz) -> Markup {
    let local = t.with_timezone(&tz);
    html! {
        time datetime=(t.to_rfc3339()) title=(local.format("%Y-%m-%d %H:%M:%S %Z")) {
            (local.format("%Y-%m-%d %H:%M"))
        }
    }
}

/// A firing: `Tue 2026-12-01 08:00` in `tz`, the weekday first (schedules are about days).
pub(super) fn firing(t: DateTime<Utc>, tz: Tz) -> Markup {
    let local = t.with_timezone(&tz);
    html! {
        time datetime=(t.to_rfc3339()) title=(local.format("%Y-%m-%d %H:%M:%S %Z")) {
            (local.format("%a %Y-%m-%d %H:%M"))
        }
    }
}

/// An optional time, or a dash.
pub(crate) fn when_opt(t: Option<DateTime<Utc>>, tz: Tz) -> Markup {
    match t {
        Some(t) => when(t, tz),
        None => html! { span.muted { "—" } },
    }
}

/// A state a page shows as a badge: the stored word, coloured by what the state means.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shown {
    Task(TaskState),
    /// A running task waiting for a person's approval.
    Waiting,
    Run(RunOutcome),
    Notice(NoticeState),
    Check(Verdict),
    /// Whether a job fires on its schedule.
    Job {
        enabled: bool,
    },
    /// What became of a mail read.
    Mail(InboxState),
    /// The mailbox's connection: `None` while the first one is made.
    Mailbox {
        up: Option<bool>,
    },
}

impl Shown {
    fn word(self) -> &'static str {
        match self {
            Shown::Task(s) => s.as_str(),
            Shown::Waiting => "waiting for approval",
            Shown::Run(o) => o.as_str(),
            Shown::Notice(n) => n.as_str(),
            Shown::Check(v) => v.as_str(),
            Shown::Job { enabled: true } => "enabled",
            Shown::Job { enabled: false } => "paused",
            Shown::Mail(m) => m.as_str(),
            Shown::Mailbox { up: None } => "connecting",
            Shown::Mailbox { up: Some(true) } => "connected",
            Shown::Mailbox { up: Some(false) } => "down",
        }
    }

    /// The badge's class: done well, gone wrong, or under way / waiting.
    fn tone(self) -> &'static str {
        use {NoticeState as N, RunOutcome as R, TaskState as T};
        match self {
            Shown::Task(T::Succeeded)
            | Shown::Run(R::Fired)
            | Shown::Notice(N::Sent)
            | Shown::Check(Verdict::Ok)
            | Shown::Job { enabled: true }
            | Shown::Mail(InboxState::Acted)
            | Shown::Mailbox { up: Some(true) } => "good",
            Shown::Task(T::Failed | T::Cancelled)
            | Shown::Run(R::Failed | R::Missed)
            | Shown::Notice(N::Failed)
            | Shown::Check(Verdict::Fail)
            | Shown::Mailbox { up: Some(false) } => "bad",
            Shown::Task(T::Pending | T::Running)
            | Shown::Waiting
            | Shown::Run(R::Skipped)
            | Shown::Notice(N::Pending)
            | Shown::Check(Verdict::Warn)
            | Shown::Job { enabled: false }
            | Shown::Mail(InboxState::Ignored)
            | Shown::Mailbox { up: None } => "busy",
        }
    }
}

/// A state as a coloured badge (the colour follows what the state means; the word stays
/// readable).
pub(super) fn badge(state: Shown) -> Markup {
    let word = state.word();
    html! { span class={"badge " (state.tone())} data-state=(word) { (word) } }
}

/// Links between views of one list (`aria_label` says what they choose), each `(href, label,
/// shown now)`; the one shown now is marked current.
pub(crate) fn tabs(
    aria_label: &str,
    links: impl IntoIterator<Item = (String, String, bool)>,
) -> Markup {
    html! {
        nav.tabs aria-label=(aria_label) {
            @for (href, label, current) in links {
                a href=(href) aria-current=[current.then_some("page")] { (label) }
            }
        }
    }
}

/// Tabs filtering the list at `path` by its `?state=`, each `(value, label)`; `shown` is the
/// value shown now.
pub(crate) fn state_tabs(path: &str, shown: &str, states: &[(&str, &str)]) -> Markup {
    tabs(
        "Filter by state",
        states.iter().map(|(value, label)| {
            (
                format!("{path}?state={value}"),
                label.to_string(),
                *value == shown,
            )
        }),
    )
}

/// A list as a table, scrolling sideways on a narrow screen, or `empty` (muted) when it has
/// nothing. `id` names the table for the tests and the stylesheet; `head` is the header row.
pub(crate) fn rows_or<T>(
    items: &[T],
    empty: Markup,
    id: &str,
    head: Markup,
    row: impl Fn(&T) -> Markup,
) -> Markup {
    html! {
        @if items.is_empty() {
            p.muted { (empty) }
        } @else {
            div.scroll { table.rows id=(id) {
                thead { tr { (head) } }
                tbody { @for item in items { (row(item)) } }
            } }
        }
    }
}

/// `text` on one line, cut to `max` characters with a mark.
pub(super) fn short(text: &str, max: usize) -> String {
    hermes_store::util::text::one_line(text, max)
}

/// Text as it was written, long text folded into `<details>` (its first line as the summary).
pub(crate) fn long_text(text: &str, class: &str) -> Markup {
    const FOLD_CHARS: usize = 240;
    const FOLD_LINES: usize = 4;
    let long = text.chars().count() > FOLD_CHARS || text.lines().count() > FOLD_LINES;
    html! {
        @if long {
            details class=(class) {
                summary { (short(text, 80)) " " span.muted { "(" (text.chars().count()) " characters)" } }
                pre { (text) }
            }
        } @else {
            pre class=(class) { (text) }
        }
    }
}

/// Markdown written by the model, as safe HTML (raw HTML shown as text, unsafe links dropped).
pub(crate) fn markdown(md: &str) -> Markup {
    PreEscaped(hermes_engine::notify::render_markdown(md))
}
