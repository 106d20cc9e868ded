//! Storage faults on a filesystem that really fills up: the data dir on a small tmpfs mounted
//! for the test (as root, as here and in CI) and filled by a file written until the kernel
//! answers ENOSPC. SQLite then fails a write when it appends to the WAL, at commit — after an
//! `INSERT … RETURNING` has already produced its row. Where no tmpfs can be mounted, SQLite's
//! page cap (`StoreOptions::max_pages`) stands in: it fails a write at the statement instead,
//! cannot be lifted while the app runs, and never fails a delete, so the tests that need the
//! disk to fill mid-run or a delete to fail say they are skipped. `HERMES_TEST_PAGE_CAP=1`
//! chooses the stand-in even where a tmpfs could be mounted.
//!
//! The promise under test: a write that did not commit is an error wherever it surfaces (the
//! API's `503 storage_unavailable`, a tool error, the task's end), never a success; nothing
//! reported done is lost.

use crate::common;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use hermes_config::{Config, Settings, WebhookSettings};
use hermes_engine::agent::JobExecution;
use hermes_engine::agent::{RunOptions, Submit};
use hermes_engine::llm::ToolCall;
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_engine::tools::{ToolContext, ToolError};
use hermes_store::{FailReason, Origin, Store, StoreOptions, TaskState};
use hermes_surfaces::app::{App, BuildOptions};
use hermes_surfaces::http::{ApiState, router};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// The tmpfs: room for the database and the memory index, small enough to fill in a moment.
const TMPFS_OPTIONS: &str = "size=16m,mode=0700";
/// The stand-in's cap, in 4 KiB pages: a fresh database and a few rows.
const PAGE_CAP: u32 = 64;
/// Writes tried before a full disk must have refused one.
const TRIES: usize = 200;
/// How long a background retry may take to write a task's end once space is back.
const RECOVERY: Duration = Duration::from_secs(20);

/// A data dir that can be filled and freed.
struct SmallDisk {
    dir: tempfile::TempDir,
    /// A tmpfs is mounted on `dir`; otherwise the page cap stands in.
    mounted: bool,
}

impl SmallDisk {
    fn new() -> SmallDisk {
        let dir = tempfile::tempdir().expect("temp dir");
        let mounted = std::env::var_os("HERMES_TEST_PAGE_CAP").is_none()
            && Command::new("mount")
                .args(["-t", "tmpfs", "-o", TMPFS_OPTIONS, "hermes-test"])
                .arg(dir.path())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!(
                "storage_faults: no tmpfs (not root, or HERMES_TEST_PAGE_CAP set); SQLite's page cap stands in for a full disk"
            );
        }
        SmallDisk { dir, mounted }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn filler(&self) -> PathBuf {
        self.path().join("filler")
    }

    /// Take every free block of the tmpfs: a file written until ENOSPC, 64 KiB at a time.
    /// Under the page cap there is nothing to do: the database is capped from the start.
    fn fill(&self) {
        if !self.mounted {
            return;
        }
        crate::common::fill_until_full(&self.filler());
    }

    /// Give the space back.
    fn free(&self) {
        if self.mounted {
            std::fs::remove_file(self.filler()).expect("filler removed");
        }
    }

    /// The app on this disk, with the test's quick retries.
    async fn app(&self, settings: Settings) -> App {
        self.app_with(settings, 0).await
    }

    /// [`SmallDisk::app`] with `connections` in its pool (0: the default).
    async fn app_with(&self, settings: Settings, connections: u32) -> App {
        let store = if self.mounted {
            StoreOptions {
                max_connections: connections,
                ..StoreOptions::default()
            }
        } else {
            // Created at full size first, so the schema exists before the cap.
            Store::open(self.path())
                .await
                .expect("fresh store")
                .close()
                .await;
            StoreOptions {
                max_pages: Some(PAGE_CAP),
                max_connections: connections,
                ..StoreOptions::default()
            }
        };
        let config = Config::from_settings(settings, self.path().to_path_buf());
        App::build_with(
            config,
            JobExecution::Direct,
            BuildOptions {
                model_retry: Some(common::fast_retry()),
                tool_backoff: Some(Duration::from_millis(5)),
                store,
                ..Default::default()
            },
        )
        .await
        .expect("app builds")
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        if self.mounted {
            // Lazily: the app's files may still be open; the kernel lets go once they close.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

async fn send(api: &Router, req: Request<Body>) -> (StatusCode, Value) {
    let what = format!("{} {}", req.method(), req.uri());
    let resp = api.clone().oneshot(req).await.expect("answered");
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "{what} → {status}: not JSON ({e}): {}",
                common::text(&bytes)
            )
        })
    };
    (status, body)
}

fn post(path: &str, body: Value) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("request")
}

/// A dashboard page as a browser gets it (no token set: the page makes its own session).
async fn html(api: &Router, path: &str) -> String {
    let req = Request::get(path)
        .header(header::ACCEPT, "text/html")
        .body(Body::empty())
        .expect("request");
    let resp = api.clone().oneshot(req).await.expect("answered");
    assert_eq!(resp.status(), StatusCode::OK, "{path}");
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("body");
    String::from_utf8_lossy(&bytes).into_owned()
}

fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).expect("request")
}

/// A full disk's answer: 503 `storage_unavailable`, naming the file and what to do.
fn assert_storage_unavailable(status: StatusCode, v: &Value) {
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    let (code, message) = common::error_of(v);
    assert_eq!(code, "storage_unavailable", "{v}");
    assert!(
        message.contains("hermes.db") && message.contains("free disk space"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_full_disk_a_task_is_refused_with_a_503_never_accepted_and_lost() {
    let disk = SmallDisk::new();
    let model = ScriptedModel::start_with(common::echo_model).await;
    let mut settings = common::settings(&model.base_url());
    // No worker runs here: a `wait` on a task that was stored after all ends within a minute.
    settings.agent.task_timeout_s = 5;
    let app = disk.app(settings).await;
    let api = router(ApiState::new(&app));
    disk.fill();
    // Each task needs pages of its own, so under the page cap too the next one after a
    // refusal is refused.
    let padding = "x".repeat(5_000);
    let mut accepted = Vec::new();
    let mut refused = None;
    for i in 0..TRIES {
        let (status, v) = send(
            &api,
            post("/v1/tasks", json!({"task": format!("task {i} {padding}")})),
        )
        .await;
        if status != StatusCode::ACCEPTED {
            refused = Some((status, v));
            break;
        }
        accepted.push(v["id"].as_str().expect("an id").to_string());
    }
    let (status, v) = refused.expect("a full disk refuses a task");
    assert_storage_unavailable(status, &v);
    // Waiting for a task that cannot be stored is the same refusal, not a "not found".
    let wait = json!({"task": format!("and wait {padding}"), "wait": true});
    let (status, v) = send(&api, post("/v1/tasks", wait)).await;
    assert_storage_unavailable(status, &v);
    // Every task the API accepted exists, on the full disk and once space is back.
    for id in &accepted {
        let (status, v) = send(&api, get(&format!("/v1/tasks/{id}"))).await;
        assert_eq!(status, StatusCode::OK, "accepted task {id} lost: {v}");
    }
    disk.free();
    for id in &accepted {
        let (status, v) = send(&api, get(&format!("/v1/tasks/{id}"))).await;
        assert_eq!(status, StatusCode::OK, "accepted task {id} lost: {v}");
    }
    if disk.mounted {
        let (status, v) = send(&api, post("/v1/tasks", json!({"task": "after"}))).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{v}");
        let id = v["id"].as_str().expect("an id");
        let (status, v) = send(&api, get(&format!("/v1/tasks/{id}"))).await;
        assert_eq!(status, StatusCode::OK, "{v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_full_disk_the_notify_tool_fails_and_every_notice_it_queued_is_sent() {
    let disk = SmallDisk::new();
    let model = ScriptedModel::start_with(common::echo_model).await;
    let (url, received) = common::webhook_receiver().await;
    let mut settings = common::settings(&model.base_url());
    settings.notify.webhooks.insert(
        "ops".into(),
        WebhookSettings {
            url,
            secret: String::new(),
        },
    );
    let app = disk.app(settings).await;
    let task = app
        .agent
        .create(Submit::new("watch the site", Origin::Cli, None))
        .await
        .expect("task");
    let ctx = ToolContext {
        task_id: task.id.clone(),
        origin: Origin::Cli,
        ..ToolContext::default()
    };
    disk.fill();
    let text = "The price dropped. ".repeat(250);
    let mut queued = 0;
    let mut failed = None;
    for i in 0..TRIES {
        let call = ToolCall::new(
            format!("call_{i}"),
            "notify",
            json!({"channel": "ops", "title": format!("notice {i}"), "text": text}),
        );
        let outcome = app.agent.registry().execute(&call, &ctx, None).await;
        match outcome.error {
            None => queued += 1,
            Some(e) => {
                failed = Some((e, outcome.content));
                break;
            }
        }
    }
    let (error, content) = failed.expect("a full disk fails the notify tool");
    assert!(
        matches!(&error, ToolError::Failed(m) if m.contains("disk full")),
        "{error:?}"
    );
    // The model is told, in words it can pass on.
    assert!(content.contains("free disk space"), "{content}");
    // Every notice the tool reported queued is in the outbox and goes out.
    let stored = app.store.outbox().for_task(&task.id).await.expect("outbox");
    assert_eq!(stored.len(), queued, "notices reported queued: {queued}");
    disk.free();
    let sent = app.notifier.deliver_due().await;
    assert_eq!(sent, queued);
    assert_eq!(received.lock().expect("receiver").len(), queued);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_end_cannot_be_written_is_not_shown_running_and_is_written_once_space_is_back()
{
    let disk = Arc::new(SmallDisk::new());
    if !disk.mounted {
        eprintln!("skipped: the disk must fill while the task runs, which needs a tmpfs");
        return;
    }
    // The disk fills while the model thinks: the task started, and nothing after can be written.
    let filler = disk.clone();
    let model = ScriptedModel::start_with(move |_| {
        filler.fill();
        Reply::text("all done")
    })
    .await;
    let app = disk.app(common::settings(&model.base_url())).await;
    let api = router(ApiState::new(&app));
    let task = app
        .agent
        .create(Submit::new("check the disk", Origin::Api, None))
        .await
        .expect("task");
    let ran = app.agent.execute(&task.id, RunOptions::default()).await;
    let err = ran.expect_err("the runner could not write the end, and says so");
    assert!(err.to_string().contains("disk full"), "{err}");

    // The API shows how it ended, and that this is not saved yet — never a silent `running`.
    let (status, v) = send(&api, get(&format!("/v1/tasks/{}", task.id))).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["state"], "failed", "{v}");
    assert_eq!(v["reason"], "store", "{v}");
    let error = v["error"].as_str().unwrap_or("");
    assert!(
        error.contains("not saved") && error.contains("disk full"),
        "{error}"
    );
    let (_, list) = send(&api, get("/v1/tasks")).await;
    let listed = &list["tasks"][0];
    assert_eq!(
        (&listed["id"], &listed["state"]),
        (&json!(task.id), &json!("failed")),
        "{list}"
    );

    let (_, running) = send(&api, get("/v1/tasks?state=running")).await;
    assert_eq!(running["tasks"], json!([]), "{running}");
    // The dashboard shows it the same way: its page and the history.
    let page = html(&api, &format!("/tasks/{}", task.id)).await;
    assert!(
        page.contains("not saved") && page.contains(r#"data-state="failed""#),
        "{page}"
    );
    let history = html(&api, "/tasks").await;
    assert!(
        history.contains(r#"data-state="failed""#) && !history.contains(r#"data-state="running""#),
        "{history}"
    );

    disk.free();
    let deadline = tokio::time::Instant::now() + RECOVERY;
    let stored = loop {
        let t = app.store.tasks().get(&task.id).await.expect("readable");
        if t.state.is_finished() || tokio::time::Instant::now() >= deadline {
            break t;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(stored.state, TaskState::Failed, "{stored:?}");
    assert_eq!(stored.reason, Some(FailReason::Store), "{stored:?}");
    let (_, v) = send(&api, get(&format!("/v1/tasks/{}", task.id))).await;
    assert!(
        !v["error"].as_str().unwrap_or("").contains("not saved"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_full_disk_memory_add_is_a_503_and_every_fact_added_is_kept() {
    let disk = SmallDisk::new();
    let model = ScriptedModel::start_with(common::echo_model).await;
    let app = disk.app(common::settings(&model.base_url())).await;
    assert!(app.memory.is_some(), "memory is on");
    let api = router(ApiState::new(&app));
    disk.fill();
    let mut added = Vec::new();
    let mut refused = None;
    for i in 0..TRIES {
        let text = format!("fact number {i}: {}", "the sky is blue ".repeat(100));
        let (status, v) = send(&api, post("/v1/memory", json!({ "text": text }))).await;
        if status != StatusCode::CREATED {
            refused = Some((status, v));
            break;
        }
        added.push(v["id"].as_str().expect("an id").to_string());
    }
    let (status, v) = refused.expect("a full disk refuses a fact");
    assert_storage_unavailable(status, &v);
    for id in &added {
        app.store
            .facts()
            .get(id)
            .await
            .expect("an added fact is kept");
    }
}

/// A fact's `BEGIN IMMEDIATE` whose `COMMIT` fails on the full disk: SQLite rolls back by
/// itself, and sqlx, still counting a transaction open on that connection, would refuse every
/// later `BEGIN IMMEDIATE` on it. With one connection in the pool the next fact, once space is
/// back, is written on that same connection, unless the pool closed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_commit_failed_on_a_full_disk_the_next_fact_is_stored_once_space_is_back() {
    let disk = SmallDisk::new();
    if !disk.mounted {
        eprintln!("skipped: the page cap fails the statement, only a full tmpfs fails a COMMIT");
        return;
    }
    let model = ScriptedModel::start_with(common::echo_model).await;
    let app = disk.app_with(common::settings(&model.base_url()), 1).await;
    let api = router(ApiState::new(&app));
    disk.fill();
    let mut refused = None;
    for i in 0..TRIES {
        let text = format!("fact number {i}: {}", "the sky is blue ".repeat(100));
        let (status, v) = send(&api, post("/v1/memory", json!({ "text": text }))).await;
        if status != StatusCode::CREATED {
            refused = Some((status, v));
            break;
        }
    }
    let (status, v) = refused.expect("a full disk refuses a fact");
    assert_storage_unavailable(status, &v);
    disk.free();
    let (status, v) = send(
        &api,
        post("/v1/memory", json!({"text": "the disk was freed"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().expect("an id");
    app.store.facts().get(id).await.expect("the fact is stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_full_disk_memory_forget_is_a_503_and_the_fact_stays() {
    let disk = SmallDisk::new();
    if !disk.mounted {
        eprintln!("skipped: the page cap never fails a delete; a full tmpfs does");
        return;
    }
    let model = ScriptedModel::start_with(common::echo_model).await;
    let app = disk.app(common::settings(&model.base_url())).await;
    let api = router(ApiState::new(&app));
    let (status, v) = send(
        &api,
        post("/v1/memory", json!({"text": "the cat is called Tom"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().expect("an id").to_string();
    disk.fill();
    let forget = Request::delete(format!("/v1/memory/{id}"))
        .body(Body::empty())
        .expect("request");
    let (status, v) = send(&api, forget).await;
    assert_storage_unavailable(status, &v);
    app.store.facts().get(&id).await.expect("the fact stays");
    disk.free();
    let forget = Request::delete(format!("/v1/memory/{id}"))
        .body(Body::empty())
        .expect("request");
    let (status, v) = send(&api, forget).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{v}");
}

/// `doctor` on a data dir whose database file was damaged: the check fails and says what to do,
/// for a file that is no database at all and for one whose pages were overwritten.
#[tokio::test]
async fn doctor_names_a_damaged_database_and_what_to_do() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let store = Store::open(&data).await.unwrap();
        for i in 0..200 {
            let fact = format!("fact number {i} about the tea {}", "x".repeat(200));
            store.facts().upsert(&fact, &[], "test").await.unwrap();
        }
        store.close().await;
    }
    let doctor = |data: &Path| {
        let out = crate::process::base_command(dir.path(), &[])
            .arg("--data-dir")
            .arg(data)
            .arg("doctor")
            .output()
            .unwrap();
        common::text(&out.stdout)
    };
    let sound = doctor(&data);
    assert!(
        sound.contains("[ok  ] database: SQLite") && sound.contains("sound"),
        "{sound}"
    );

    // Pages in the middle overwritten, the header kept: SQLite opens it, its check does not pass.
    let db = data.join(hermes_store::DB_FILE);
    let mut file = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    file.seek(SeekFrom::Start(3 * 4096)).unwrap();
    file.write_all(&[0xA5; 8 * 4096]).unwrap();
    drop(file);
    let damaged = doctor(&data);
    assert!(damaged.contains("[FAIL] database"), "{damaged}");
    assert!(
        damaged.contains("damaged") && damaged.contains("backup"),
        "{damaged}"
    );

    // No database at all.
    std::fs::write(&db, vec![0x5A; 8192]).unwrap();
    let garbage = doctor(&data);
    assert!(
        garbage.contains("[FAIL] database") && garbage.contains("damaged"),
        "{garbage}"
    );
}
