//! The daemon on PostgreSQL (`storage.url`), as a user meets it: the real `hermes-agent serve`
//! on a real PostgreSQL cluster started by the test (one per test process, a fresh database per
//! test; a cluster of its own for the test that stops its server). An API task and a job firing
//! run end to end with every row in PostgreSQL; a second daemon joins it as another node (one
//! started from a copy of the first one's data dir is refused); several nodes at work are in
//! `nodes.rs`;
//! an unreachable or read-only server is a clear error, `/healthz` says why, and the daemon
//! carries on once the server is back.

use crate::common::echo_model;
use crate::daemon::Site;
use crate::process::PATIENCE;
use hermes_engine::llm::scripted::ScriptedModel;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

#[path = "../../../crates/store/src/test_postgres.rs"]
pub(crate) mod cluster;

mod faults;
mod fencing;
mod health;
mod migrate;
mod nodes;
mod two_nodes;

const PASSWORD_VAR: &str = "HERMES_TEST_DB_PASSWORD";

/// A site whose settings point at `url` (written into settings.yaml as is).
fn site_on(model_url: &str, url: &str) -> Site {
    let site = Site::new(model_url, &[], &[]);
    let mut yaml = std::fs::read_to_string(site.config()).expect("settings");
    yaml.push_str(&format!("storage:\n  url: \"{url}\"\n"));
    std::fs::write(site.config(), yaml).expect("settings written");
    site
}

/// A fresh database on the shared cluster; its name.
async fn fresh_database() -> String {
    tokio::task::spawn_blocking(|| cluster::cluster().create_database())
        .await
        .expect("the cluster's thread")
}

/// `sql`'s one-line answer in database `db` of the shared cluster.
async fn psql(db: &str, sql: &str) -> String {
    let (db, sql) = (db.to_string(), sql.to_string());
    tokio::task::spawn_blocking(move || cluster::cluster().psql(&db, &sql))
        .await
        .expect("the cluster's thread")
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_on_postgres_runs_a_task_and_a_job_and_a_second_node_joins_it() {
    let model = ScriptedModel::start_with(echo_model).await;
    let db = fresh_database().await;
    let c = cluster::cluster();
    // The password from the environment, through ${VAR} in the URL.
    let url = format!(
        "postgres://hermes:${{{PASSWORD_VAR}}}@127.0.0.1:{}/{db}",
        c.port
    );
    let site = site_on(&model.base_url(), &url);
    let env = [(PASSWORD_VAR, cluster::PASSWORD)];
    let mut d = site.start(&env);
    d.ready().await;

    let id = d.submit("what is 17 * 23?").await;
    let t = d.finished(&id).await;
    assert_eq!(t["state"], "succeeded", "{t}");
    assert_eq!(t["answer"], "answer to: what is 17 * 23?");
    assert!(!t["steps"].as_array().expect("steps").is_empty(), "{t}");

    // A job due in a moment fires once, its run recorded and its task answered.
    let due = chrono::Utc::now() + chrono::Duration::seconds(1);
    let (status, job) = d
        .post(
            "/v1/jobs",
            json!({"name": "soon", "task": "say hello", "schedule": due.to_rfc3339()}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let job_id = job["id"].as_str().expect("a job id").to_string();
    let run = fired_run(&d, &job_id).await;
    assert_eq!(run["outcome"], "fired", "{run}");
    let task_id = run["task_id"].as_str().expect("the run's task").to_string();
    let t = d.finished(&task_id).await;
    assert_eq!(t["state"], "succeeded", "{t}");
    assert_eq!(t["origin"], "job");

    // Everything is in PostgreSQL, nothing in the data dir's SQLite file.
    assert_eq!(psql(&db, "SELECT COUNT(*) FROM tasks").await, "2");
    assert_eq!(
        psql(&db, "SELECT COUNT(*) FROM job_runs WHERE outcome = 'fired'").await,
        "1"
    );
    assert!(
        psql(&db, "SELECT COUNT(*) FROM task_steps")
            .await
            .parse::<i64>()
            .expect("a count")
            >= 2
    );
    assert!(!site.data().join("hermes.db").exists());

    // A second daemon started from a copy of this data dir (its node id with it) would take
    // the first one's work for its own: refused, saying what to do; the password from
    // PGPASSWORD this time.
    let other = site_on(&model.base_url(), &c.url_without_password(&db));
    std::fs::create_dir_all(other.data()).expect("data dir");
    std::fs::copy(
        site.data().join(hermes_engine::metrics::NODE_ID_FILE),
        other.data().join(hermes_engine::metrics::NODE_ID_FILE),
    )
    .expect("the node id copied");
    let mut second = other.start(&[("PGPASSWORD", cluster::PASSWORD)]);
    let status = second.exited(PATIENCE).await;
    assert!(!status.success());
    let log = second.log();
    assert!(
        log.contains("is in use by another hermes-agent daemon")
            && log.contains("each daemon needs its own data dir"),
        "{log}"
    );
    // With a node id of its own, it joins: two nodes on one database, the first one untouched
    // (its tasks were not marked interrupted).
    std::fs::remove_file(other.data().join(hermes_engine::metrics::NODE_ID_FILE))
        .expect("the copied node id removed");
    let mut third = other.start(&[("PGPASSWORD", cluster::PASSWORD)]);
    third.ready().await;
    assert_eq!(psql(&db, "SELECT COUNT(*) FROM nodes").await, "2");
    let (status, h) = d.get("/healthz").await;
    assert_eq!(
        (status, h["status"].as_str()),
        (StatusCode::OK, Some("ok")),
        "{h}"
    );
    let again = d.submit("still here?").await;
    assert_eq!(d.finished(&again).await["state"], "succeeded");
    let there = third.submit("and there?").await;
    assert_eq!(third.finished(&there).await["state"], "succeeded");
    assert_eq!(
        psql(
            &db,
            "SELECT COUNT(*) FROM tasks WHERE reason = 'interrupted'"
        )
        .await,
        "0"
    );
    third.stop().await;
    d.stop().await;
    assert!(
        !d.log().contains(cluster::PASSWORD),
        "the password was logged"
    );
}

/// The job's first run, once it is recorded with its task (bounded).
async fn fired_run(d: &crate::process::Daemon, job_id: &str) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (status, v) = d.get(&format!("/v1/jobs/{job_id}/runs")).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        if let Some(run) = v["runs"].as_array().and_then(|r| r.first())
            && run["task_id"].is_string()
        {
            return run.clone();
        }
        assert!(Instant::now() < deadline, "job {job_id} never fired: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_at_start_is_a_clear_error_without_the_password() {
    let model = ScriptedModel::start_with(echo_model).await;
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("postgres://hermes:hunter2@127.0.0.1:{port}/hermes");
    let site = site_on(&model.base_url(), &url);
    let mut d = site.start(&[]);
    let status = d.exited(PATIENCE).await;
    assert!(!status.success());
    let log = d.log();
    assert!(
        log.contains("cannot connect to the PostgreSQL database")
            && log.contains(&format!("127.0.0.1:{port}"))
            && log.contains("check that the server is running"),
        "{log}"
    );
    assert!(!log.contains("hunter2"), "the password was shown: {log}");

    // `doctor` says the same, as a failed check.
    let out = site.cli(&["doctor"], &[]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("database") && text.contains("cannot connect"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_names_an_unset_password_variable_and_doctor_shows_the_schema() {
    let model = ScriptedModel::start_with(echo_model).await;
    let db = fresh_database().await;
    let c = cluster::cluster();
    let url = format!(
        "postgres://hermes:${{HERMES_TEST_UNSET_PW}}@127.0.0.1:{}/{db}",
        c.port
    );
    let site = site_on(&model.base_url(), &url);
    let out = site.cli(&["config", "check"], &[]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success());
    assert!(
        err.contains("HERMES_TEST_UNSET_PW") && err.contains("not set"),
        "{err}"
    );

    let site = site_on(&model.base_url(), &c.url(&db));
    let out = site.cli(&["doctor"], &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    // Migrated to the newest schema this build knows, whatever its number.
    let line = text
        .lines()
        .find(|l| l.contains("PostgreSQL at"))
        .unwrap_or_else(|| panic!("{text}{}", String::from_utf8_lossy(&out.stderr)));
    let version = |after: &str| {
        line.split(after)
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse::<u32>().ok())
    };
    let (found, known) = (
        version("reachable, schema v"),
        version("this build knows v"),
    );
    assert!(found.is_some() && found == known, "{line}");
    assert!(!text.contains(cluster::PASSWORD), "{text}");
}

/// Submit `task` until it is accepted (bounded): the database is back, but a request may still
/// meet a connection cut while it was away.
async fn accepted(d: &crate::process::Daemon, task: &str) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (status, v) = d.post("/v1/tasks", json!({ "task": task })).await;
        if status == StatusCode::ACCEPTED {
            return v["id"].as_str().expect("an id").to_string();
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
        assert!(Instant::now() < deadline, "never accepted again: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A server of its own (a test that stops it), and a daemon started on it; the site holds
/// the daemon's data dir, so the caller keeps it as long as the daemon.
async fn on_own_server(model: &ScriptedModel) -> (cluster::Cluster, Site, crate::process::Daemon) {
    let own =
        tokio::task::spawn_blocking(|| cluster::Cluster::start().unwrap_or_else(|e| panic!("{e}")))
            .await
            .expect("the cluster's thread");
    let site = site_on(&model.base_url(), &own.url("postgres"));
    let mut d = site.start(&[]);
    d.ready().await;
    (own, site, d)
}

/// Answers "a task meeting an outage" after 2 s, everything else at once.
fn outage_model(req: &Value) -> hermes_engine::llm::scripted::Reply {
    use hermes_engine::llm::scripted::Reply;
    let answer = Reply::text("answered");
    if crate::common::task_text(req).contains("outage") {
        Reply::Delay(Duration::from_secs(2), Box::new(answer))
    } else {
        answer
    }
}

/// A running task whose trace cannot be written for a moment (the server restarting; the same
/// error as a pool with no free connection under load) keeps its rows, writes them once the
/// server is back, and succeeds: a moment out of reach does not cost the task its run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_waits_out_a_short_outage_of_the_server_and_succeeds() {
    let model = ScriptedModel::start_with(outage_model).await;
    let (own, _site, mut d) = on_own_server(&model).await;
    let id = d.submit("a task meeting an outage").await;
    let deadline = Instant::now() + PATIENCE;
    while model.request_count() == 0 {
        assert!(Instant::now() < deadline, "the task never called the model");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    own.stop_server();
    // The model answered meanwhile; its trace row met the stopped server.
    d.wait_log("the task's trace could not be written; trying again")
        .await;
    own.start_server();
    let t = d.finished(&id).await;
    assert_eq!(t["state"], "succeeded", "{t}");
    assert_eq!(t["answer"], "answered", "{t}");
    let (_, record) = d.get(&format!("/v1/tasks/{id}")).await;
    let models = record["steps"]
        .as_array()
        .map(|s| s.iter().filter(|s| s["kind"] == "model").count());
    assert_eq!(models, Some(1), "the model call recorded once: {record}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_server_is_reported_by_healthz_and_the_daemon_carries_on_when_it_is_back() {
    let model = ScriptedModel::start_with(echo_model).await;
    let (own, _site, mut d) = on_own_server(&model).await;
    let before = d.submit("before").await;
    assert_eq!(d.finished(&before).await["state"], "succeeded");

    own.stop_server();
    let h = d
        .health_until("status degraded", |h| h["status"] == "degraded")
        .await;
    let storage = h["storage"].as_str().unwrap_or_default();
    assert!(
        storage.contains("database unreachable") && storage.contains("storage.url"),
        "{h}"
    );
    assert!(!storage.contains(cluster::PASSWORD), "{h}");
    // A task cannot be accepted meanwhile: a 503 that says why, not a 500.
    let (status, v) = d.post("/v1/tasks", json!({"task": "while down"})).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(v["error"]["code"], "storage_unavailable", "{v}");
    d.still_running();

    own.start_server();
    // The pool reconnects by itself; a request may still meet a connection cut meanwhile.
    let after = accepted(&d, "after").await;
    assert_eq!(d.finished(&after).await["state"], "succeeded");
    // The scheduler came through the outage too: a job due now fires.
    let due = chrono::Utc::now() + chrono::Duration::seconds(1);
    let (status, job) = d
        .post(
            "/v1/jobs",
            json!({"name": "after", "task": "say hello", "schedule": due.to_rfc3339()}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let run = fired_run(&d, job["id"].as_str().expect("a job id")).await;
    assert_eq!(run["outcome"], "fired", "{run}");
    // The restart ended the session that held the database lock; the daemon took it again, so
    // a `storage migrate` into this database is still refused.
    d.wait_log("database lock taken again").await;
    let source = crate::daemon::Site::new(&model.base_url(), &[], &[]);
    let mut s = source.start(&[]);
    s.ready().await;
    s.stop().await;
    let out = source.cli(&["storage", "migrate", "--to", &own.url("postgres")], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("a hermes-agent daemon is using the database"),
        "{err}"
    );
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_server_refuses_tasks_with_a_503_and_healthz_says_read_only() {
    let model = ScriptedModel::start_with(echo_model).await;
    let db = fresh_database().await;
    let site = site_on(&model.base_url(), &cluster::cluster().url(&db));
    let mut d = site.start(&[]);
    d.ready().await;
    // As on a hot standby: every new transaction is read-only (SQLSTATE 25006 on a write).
    // The daemon's connections are cut so that they come back with the setting.
    psql(
        "postgres",
        &format!("ALTER DATABASE {db} SET default_transaction_read_only = on"),
    )
    .await;
    psql(
        "postgres",
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{db}' AND pid <> pg_backend_pid()"
        ),
    )
    .await;
    let h = d
        .health_until("the expected health", |h| {
            h["storage"]
                .as_str()
                .is_some_and(|s| s.contains("read-only"))
        })
        .await;
    assert_eq!(h["status"], "degraded", "{h}");
    let (status, v) = d.post("/v1/tasks", json!({"task": "refused"})).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(v["error"]["code"], "storage_unavailable", "{v}");

    psql(
        "postgres",
        &format!("ALTER DATABASE {db} SET default_transaction_read_only = off"),
    )
    .await;
    psql(
        "postgres",
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{db}' AND pid <> pg_backend_pid()"
        ),
    )
    .await;
    let id = accepted(&d, "accepted again").await;
    assert_eq!(d.finished(&id).await["state"], "succeeded");
    d.stop().await;
}
