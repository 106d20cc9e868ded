//! The dashboard in a real browser: headless Chromium driven over WebDriver (`chromedriver`,
//! through fantoccini), against the daemon running in this process on 127.0.0.1:0 with the
//! scripted model and a webhook receiver on loopback. Every page is photographed into
//! `target/screenshots/` (desktop, and phone width for some) for a person to look at.
//!
//! Needs Debian's `chromium` and `chromium-driver`: the first test to start a browser installs
//! them (`crate::deps`, running `scripts/ci/browser-deps.sh` as root or through passwordless
//! sudo); when it cannot, these tests fail and say how to install them — never pass silently.

use crate::common;

use fantoccini::{Client, ClientBuilder, Locator};
use hermes_config::{Config, Settings, WebhookSettings};
use hermes_engine::agent::JobExecution;
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_surfaces::app::{App, BuildOptions};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::oneshot;

/// Upper bound for anything the page waits for (a task, a delivery, a page load).
const PATIENCE: Duration = Duration::from_secs(30);
/// How long chromedriver may take to say it listens.
const DRIVER_START: Duration = Duration::from_secs(20);
/// A secret the settings page must never show.
const HOOK_SECRET: &str = "hook-secret-never-shown-4711";

/// chromedriver and the browser session it runs; both end when this is dropped.
struct Browser {
    client: Client,
    driver: tokio::process::Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start() -> Browser {
        Browser::start_with(&[]).await
    }

    /// With more Chromium flags (`--force-dark-mode`: `prefers-color-scheme: dark`).
    async fn start_with(extra: &[&str]) -> Browser {
        let installed = crate::deps::browser().await;
        let driver_bin = installed.chromedriver.clone();
        let chromium = installed.chromium.clone();
        // A free loopback port for chromedriver: bind, read, release.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let mut driver = tokio::process::Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", driver_bin.display()));
        // Ready when it says so on stdout.
        let stdout = driver.stdout.take().expect("chromedriver's stdout");
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(DRIVER_START, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("started successfully") {
                    return true;
                }
            }
            false
        })
        .await;
        assert!(
            matches!(ready, Ok(true)),
            "chromedriver did not start on port {port}"
        );
        // Keep draining its output so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let profile = tempfile::tempdir().expect("a browser profile dir");
        let args = [
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--no-first-run".into(),
            "--hide-scrollbars".into(),
            "--window-size=1280,1100".into(),
            // A DNS-rebinding name that resolves to the daemon, for the Host check.
            "--host-resolver-rules=MAP rebind.test 127.0.0.1".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ]
        .into_iter()
        .chain(extra.iter().map(|a| a.to_string()))
        .collect::<Vec<_>>();
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"binary": chromium, "args": args}),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| panic!("cannot open a Chromium session through chromedriver: {e}"));
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }

    async fn stop(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver leads its own process group; the browser it started is in it too.
        if let Some(pid) = self.driver.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
        }
    }
}

/// The daemon, in this process, on 127.0.0.1:0.
struct Daemon {
    base: String,
    addr: SocketAddr,
    app: App,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Daemon {
    async fn start(settings: Settings) -> Daemon {
        let dir = tempfile::tempdir().expect("a data dir");
        let config = Config::from_settings(settings, dir.path().to_path_buf());
        let options = BuildOptions {
            model_retry: Some(common::fast_retry()),
            tool_backoff: Some(Duration::from_millis(5)),
            notify_retry: Some(hermes_store::util::RetryPolicy {
                max_retries: 1,
                backoff: hermes_store::util::Backoff::new(
                    Duration::from_millis(50),
                    Duration::from_millis(50),
                ),
            }),
            ..Default::default()
        };
        let app = App::build_with(config, JobExecution::Pool, options)
            .await
            .expect("the app builds");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let (stop, stopped) = oneshot::channel::<()>();
        let running = app.clone();
        let done = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            if let Err(e) = hermes_surfaces::daemon::run(running, listener, shutdown).await {
                panic!("the daemon failed: {e}");
            }
        });
        Daemon {
            base: format!("http://{addr}"),
            addr,
            app,
            stop: Some(stop),
            done: Some(done),
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(d) = self.done.take() {
            let _ = tokio::time::timeout(PATIENCE, d).await;
        }
    }
}

/// A model for the scenarios: a task that says `slow steps` calls a tool, then answers, with a
/// pause before each reply, so a page sees its steps arrive; anything else is answered at once.
fn model(req: &Value) -> Reply {
    let task = common::task_text(req);
    let after_tool = req["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
    let pause = Duration::from_millis(1500);
    if task.contains("slow steps") {
        if after_tool {
            let answer = Reply::text("The news, in short:\n\n- **markets** calm\n- *weather* fine");
            Reply::Delay(pause, Box::new(answer))
        } else {
            let call = Reply::tool_calls(&[("recall", json!({"query": "news sources"}))]);
            Reply::Delay(pause, Box::new(call))
        }
    } else {
        Reply::text(&format!("Today's digest for: {task}\n\nAll **quiet**."))
    }
}

fn settings(model_url: &str, hook_url: &str) -> Settings {
    let mut s = common::settings(model_url);
    s.notify.webhooks.insert(
        "ops".into(),
        WebhookSettings {
            url: hook_url.into(),
            secret: HOOK_SECRET.into(),
        },
    );
    s.server.port = 0;
    s
}

/// Save the whole page as `target/screenshots/NAME.png`: the window is stretched to the
/// page's height for the picture (a screenshot shows only the window), then put back.
async fn shot(c: &Client, name: &str) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&dir).expect("the screenshot dir");
    let (w, h) = c.get_window_size().await.expect("the window size");
    let page = c
        .execute("return document.documentElement.scrollHeight;", vec![])
        .await
        .expect("a script");
    let tall = page.as_u64().unwrap_or(h).clamp(h, 4000)
        + h.saturating_sub(inner_height(c).await).min(200);
    c.set_window_size(w as u32, tall as u32)
        .await
        .expect("a taller window");
    let png = c.screenshot().await.expect("a screenshot");
    c.set_window_size(w as u32, h as u32)
        .await
        .expect("the window back");
    std::fs::write(dir.join(format!("{name}.png")), png).expect("the screenshot saved");
}

async fn inner_height(c: &Client) -> u64 {
    c.execute("return window.innerHeight;", vec![])
        .await
        .expect("a script")
        .as_u64()
        .unwrap_or(0)
}

async fn wait_for(c: &Client, css: &str) -> fantoccini::elements::Element {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match c.wait().at_most(left).for_element(Locator::Css(css)).await {
            Ok(element) => return element,
            // A lookup that a navigation (a form's redirect) interrupts gets chromedriver's
            // "aborted by navigation", which is not a WebDriver error: the next page is
            // loading, so look again on it.
            Err(fantoccini::error::CmdError::NotW3C(_))
                if tokio::time::Instant::now() < deadline => {}
            Err(e) => panic!("{css} did not appear: {e}"),
        }
    }
}

/// The text of `css` once it is there. A page that reloads meanwhile (a task page at its
/// task's end, a list a live stream redraws) replaces the element: then it is looked up again.
async fn text(c: &Client, css: &str) -> String {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match wait_for(c, css).await.text().await {
            Ok(t) => return t,
            // chromedriver says "stale element reference", or, when the node goes between its
            // lookup and the read, an "unknown error" (the inspector's "does not belong to the
            // document"; seen once in CI): both are a replaced element.
            Err(e)
                if (e.is_stale_element_reference() || e.is_unknown_error())
                    && tokio::time::Instant::now() < deadline => {}
            Err(e) => panic!("the text of {css}: {e}"),
        }
    }
}

/// Reload until `css` is on the page (state that changes without a live stream: a run's
/// delivery), within [`PATIENCE`].
async fn reload_until(c: &Client, css: &str) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if c.find(Locator::Css(css)).await.is_ok() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{css} never appeared"
        );
        // A poll: what is awaited happens in the daemon, which tells the page nothing.
        tokio::time::sleep(Duration::from_millis(200)).await;
        c.refresh().await.expect("a reload");
    }
}

async fn path_of(c: &Client) -> String {
    c.current_url().await.expect("a URL").path().to_string()
}

async fn fill(c: &Client, css: &str, value: &str) {
    let e = wait_for(c, css).await;
    e.clear().await.expect("cleared");
    e.send_keys(value).await.expect("typed");
}

async fn click(c: &Client, css: &str) {
    wait_for(c, css).await.click().await.expect("clicked");
}

/// Start a task from the form and watch its steps arrive on its page without a reload.
async fn start_a_task_and_watch_it(c: &Client, d: &Daemon) -> String {
    c.goto(&d.url("/tasks")).await.expect("the tasks page");
    shot(c, "tasks").await;
    fill(c, "#task-text", "Summarise the news (slow steps)").await;
    click(c, "#h-start + form button[type=submit]").await;
    wait_for(c, "#timeline[data-events]").await;
    let path = path_of(c).await;
    let id = path
        .strip_prefix("/tasks/")
        .expect("the task's page")
        .to_string();
    let at_load = c
        .find_all(Locator::Css("#timeline li.step"))
        .await
        .expect("steps")
        .len();
    // Marks this very document: a reload would lose it.
    c.execute("window.notReloaded = true; return true;", vec![])
        .await
        .expect("a script");
    wait_for(c, "#timeline li.step.tool[data-seq='2']").await;
    let still = c
        .execute("return window.notReloaded === true;", vec![])
        .await
        .expect("a script");
    assert_eq!(
        still,
        json!(true),
        "the steps came over the event stream, not by a reload"
    );
    let live = c
        .find_all(Locator::Css("#timeline li.step"))
        .await
        .expect("steps")
        .len();
    assert!(
        live > at_load,
        "steps arrived while the page was open ({at_load} → {live})"
    );
    assert!(
        text(c, "#timeline li.step.tool .name")
            .await
            .contains("recall")
    );
    shot(c, "task-running").await;
    // At the end the page shows the final state and the answer (as formatted Markdown).
    wait_for(c, "#task-state .badge[data-state='succeeded']").await;
    assert!(text(c, "#answer li strong").await.contains("markets"));
    let model_meta = text(c, "#timeline li.step.model .meta").await;
    assert!(
        model_meta.contains("ms") && model_meta.contains("tokens"),
        "{model_meta}"
    );
    shot(c, "task-done").await;
    let t = d.app.store.tasks().get(&id).await.expect("the task");
    assert_eq!(t.origin, hermes_store::Origin::Web);
    id
}

/// A job with a bad, then a good schedule; its page; pause and resume; a run followed to its
/// task and its delivery.
async fn make_a_job_and_run_it(c: &Client, d: &Daemon, received: &Mutex<Vec<Value>>) {
    c.goto(&d.url("/jobs")).await.expect("the jobs page");
    fill(c, "#job-name", "Morning digest").await;
    fill(c, "#job-task", "Summarise my feeds").await;
    fill(c, "#job-schedule", "at teatime").await;
    let error = text(c, "#schedule-preview p.error").await;
    assert!(
        error.contains("at teatime") && error.contains("5-field cron"),
        "{error}"
    );
    shot(c, "jobs-bad-schedule").await;
    fill(c, "#job-schedule", "0 8 * * *").await;
    let ok = text(c, "#schedule-preview .ok-line").await;
    assert!(ok.contains("every day at 08:00 (UTC)"), "{ok}");
    let next = c
        .find_all(Locator::Css("#schedule-preview ol li"))
        .await
        .expect("firings");
    assert_eq!(next.len(), 5);
    click(c, "input[name=notify][value=ops]").await;
    shot(c, "jobs-preview").await;
    click(c, "#job-form button[type=submit]").await;
    wait_for(c, "#firings").await;
    assert!(path_of(c).await.starts_with("/jobs/j_"));
    let firings = c
        .find_all(Locator::Css("#firings li"))
        .await
        .expect("firings");
    assert_eq!(firings.len(), 5);
    click(c, "form[action$='/pause'] button").await;
    wait_for(c, "#job-state .badge[data-state='paused']").await;
    click(c, "form[action$='/resume'] button").await;
    wait_for(c, "#job-state .badge[data-state='enabled']").await;

    click(c, "form[action$='/run'] button").await;
    // The run's row exists only on the page after the click.
    wait_for(c, "#runs td a[href^='/tasks/']").await;
    assert!(text(c, ".flash").await.contains("Run started"));
    reload_until(c, "#runs .delivery .badge[data-state='sent']").await;
    shot(c, "job").await;
    let body = received
        .lock()
        .expect("the receiver")
        .first()
        .cloned()
        .expect("a webhook");
    let text_sent = body["text"].as_str().unwrap_or("");
    assert!(text_sent.contains("All **quiet**"), "{text_sent}");
    assert!(
        text_sent.contains("Job **Morning digest** · next run"),
        "the footer: {text_sent}"
    );
    // From the run to its task, and its delivery there.
    click(c, "#runs td a[href^='/tasks/']").await;
    wait_for(c, "#task-state .badge[data-state='succeeded']").await;
    assert!(text(c, ".notices").await.contains("ops"));
    wait_for(c, ".notices .badge[data-state='sent']").await;
    c.goto(&d.url("/deliveries")).await.expect("the outbox");
    wait_for(c, "#deliveries .badge[data-state='sent']").await;
    shot(c, "deliveries").await;
}

/// Add a fact, find it, forget it.
async fn remember_and_forget(c: &Client, d: &Daemon) {
    c.goto(&d.url("/memory")).await.expect("the memory page");
    fill(
        c,
        "#fact-text",
        "The user prefers oolong tea in the morning",
    )
    .await;
    fill(c, "#fact-tags", "preference, drinks").await;
    click(c, "#h-add + form button").await;
    assert!(text(c, ".flash").await.contains("Remembered"));
    fill(c, "#m-q", "oolong").await;
    click(c, "form[role=search] button").await;
    let found = text(c, "#facts li p.fact").await;
    assert_eq!(found, "The user prefers oolong tea in the morning");
    shot(c, "memory").await;
    click(c, "#facts li form button").await;
    assert!(text(c, ".flash").await.contains("Forgotten"));
    wait_for(c, "#no-facts").await;
}

/// The settings with the checks loaded, and no secret anywhere in the page.
async fn settings_without_secrets(c: &Client, d: &Daemon) {
    c.goto(&d.url("/settings"))
        .await
        .expect("the settings page");
    wait_for(c, "#checks ul.checks").await;
    let checks = text(c, "#checks").await;
    assert!(
        checks.contains("daemon") && checks.contains("webhook ops"),
        "{checks}"
    );
    let source = c.source().await.expect("the page");
    assert!(
        !source.contains(HOOK_SECRET),
        "a secret on the settings page"
    );
    assert!(source.contains("(set, hidden)"));
    shot(c, "settings").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_browser() {
    let model = ScriptedModel::start_with(model).await;
    let (hook, received) = common::webhook_receiver().await;
    let d = Daemon::start(settings(&model.base_url(), &hook)).await;
    let b = Browser::start().await;
    let c = &b.client;

    c.goto(&d.url("/")).await.expect("the overview");
    assert_eq!(text(c, "h1").await, "Overview");
    shot(c, "overview-empty").await;
    let task = start_a_task_and_watch_it(c, &d).await;
    make_a_job_and_run_it(c, &d, &received).await;
    remember_and_forget(c, &d).await;
    settings_without_secrets(c, &d).await;

    // The task list filters and searches.
    c.goto(&d.url("/tasks?origin=web&q=news"))
        .await
        .expect("the list");
    let rows = c
        .find_all(Locator::Css("table.tasks tbody tr"))
        .await
        .expect("rows");
    assert_eq!(rows.len(), 1);
    c.goto(&d.url("/")).await.expect("the overview");
    assert!(text(c, ".cards").await.contains("Tokens today"));
    shot(c, "overview").await;

    // At phone width.
    c.set_window_size(390, 844).await.expect("phone width");
    shot(c, "phone-overview").await;
    c.goto(&d.url(&format!("/tasks/{task}")))
        .await
        .expect("the task");
    shot(c, "phone-task").await;
    c.goto(&d.url("/jobs")).await.expect("the jobs");
    shot(c, "phone-jobs").await;
    b.stop().await;

    // In the dark.
    let dark = Browser::start_with(&["--force-dark-mode"]).await;
    let c = &dark.client;
    for (path, name) in [
        ("/".to_string(), "dark-overview"),
        (format!("/tasks/{task}"), "dark-task"),
        ("/jobs".into(), "dark-jobs"),
    ] {
        c.goto(&d.url(&path)).await.expect("a page");
        wait_for(c, "h1").await;
        shot(c, name).await;
    }
    dark.stop().await;
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_in_with_the_token_and_a_foreign_host() {
    let model = ScriptedModel::start_with(model).await;
    let (hook, _) = common::webhook_receiver().await;
    let mut s = settings(&model.base_url(), &hook);
    s.server.token = "browser-test-token".into();
    let d = Daemon::start(s).await;
    let b = Browser::start().await;
    let c = &b.client;

    c.goto(&d.url("/jobs")).await.expect("a page");
    wait_for(c, "#token").await;
    assert_eq!(path_of(c).await, "/login");
    fill(c, "#token", "not-the-token").await;
    click(c, "form button[type=submit]").await;
    assert!(text(c, "#login-error").await.contains("not the token"));
    shot(c, "login-refused").await;
    fill(c, "#token", "browser-test-token").await;
    click(c, "form button[type=submit]").await;
    wait_for(c, "#job-form").await;
    assert_eq!(
        path_of(c).await,
        "/jobs",
        "back where the browser was going"
    );
    click(c, ".signout button").await;
    wait_for(c, "#token").await;
    assert_eq!(path_of(c).await, "/login");

    // A DNS-rebinding name that reaches the daemon is refused, page or not.
    let port = d.addr.port();
    c.goto(&format!("http://rebind.test:{port}/"))
        .await
        .expect("a page");
    let source = c.source().await.expect("the page");
    assert!(source.contains("misdirected_host"), "{source}");

    b.stop().await;
    d.stop().await;
}
