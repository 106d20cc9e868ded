//! `hermes-agent storage migrate --to postgres://…`: a SQLite data dir with tasks and their
//! traces, a job and its run, a fact, copied into an empty PostgreSQL database, counted on both
//! sides; a daemon on PostgreSQL then shows the same tasks and job and numbers new rows after
//! the copied ones, and the data dir switched to it finds the facts (its memory index rebuilt).
//! The output names what is not copied. A non-empty target, and a data dir a daemon still runs
//! on, are refused.

use super::{cluster, fired_run, psql, site_on};
use crate::common::echo_model;
use crate::daemon::Site;
use hermes_engine::llm::scripted::ScriptedModel;
use reqwest::StatusCode;
use serde_json::json;

fn output(out: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_data_dir_moves_to_an_empty_postgres_database_and_a_daemon_carries_on_there() {
    let model = ScriptedModel::start_with(echo_model).await;
    let embed = crate::meaning::EmbedServer::start(&[]);
    let site = Site::new(&model.base_url(), &[], &[]);
    crate::meaning::with_embeddings(&site, &embed.base_url);
    let mut d = site.start(&[]);
    d.ready().await;
    let task = d.submit("what is 6 * 7?").await;
    assert_eq!(d.finished(&task).await["state"], "succeeded");
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
    let job_task = run["task_id"].as_str().expect("its task").to_string();
    assert_eq!(d.finished(&job_task).await["state"], "succeeded");
    let (status, fact) = d
        .post("/v1/memory", json!({"text": "the user drinks oolong tea"}))
        .await;
    assert!(status.is_success(), "{fact}");
    // Its vector, which moves with it.
    crate::meaning::found_by_meaning(&d, "oolong tea").await;

    let db = super::fresh_database().await;
    let url = cluster::cluster().url(&db);
    // The daemon still writes to the data dir: the copy could miss rows.
    let out = site.cli(&["storage", "migrate", "--to", &url], &[]);
    let (_, err) = output(&out);
    assert!(!out.status.success());
    assert!(err.contains("stop the daemon first"), "{err}");
    // Refused before the target was touched.
    let tables = "SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public'";
    assert_eq!(psql(&db, tables).await, "0");
    d.stop().await;

    let out = site.cli(&["storage", "migrate", "--to", &url], &[]);
    let (text, err) = output(&out);
    assert!(out.status.success(), "{text}{err}");
    for table in [
        "tasks",
        "task_steps",
        "jobs",
        "job_runs",
        "facts",
        "fact_vectors",
    ] {
        let n = psql(&db, &format!("SELECT COUNT(*) FROM {table}")).await;
        assert_ne!(n, "0", "{table} is empty after the copy:\n{text}");
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == [table, n.as_str()]),
            "{table} {n} not in:\n{text}"
        );
    }
    assert_eq!(psql(&db, "SELECT COUNT(*) FROM tasks").await, "2");
    // 256 dimensions, 4 bytes each, as they were.
    let bytes = "SELECT length(vector) FROM fact_vectors";
    assert_eq!(psql(&db, bytes).await, "1024");
    assert!(text.contains("every table's count matches"), "{text}");
    assert!(
        text.contains("storage:\n    url: postgres://hermes:${HERMES_DB_PASSWORD}@"),
        "{text}"
    );
    assert!(!text.contains(cluster::PASSWORD) && !err.contains(cluster::PASSWORD));
    // What is not copied is named, with why.
    for (table, why) in [
        ("nodes", "each daemon joins afresh"),
        ("fact_changes", "memory index rebuilds from the facts once"),
        ("sessions", "sign in again"),
    ] {
        assert!(
            text.lines().any(|l| l.contains(table) && l.contains(why)),
            "{table} not named as not copied:\n{text}"
        );
    }

    // Into a database that has rows: refused, nothing written.
    let out = site.cli(&["storage", "migrate", "--to", &url], &[]);
    let (_, err) = output(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("is not empty") && err.contains("tasks has 2 rows"),
        "{err}"
    );
    assert_eq!(psql(&db, "SELECT COUNT(*) FROM tasks").await, "2");

    // A daemon on the copy: the same task with its trace, the same job; a new run of the job
    // is numbered after the copied one.
    let moved = site_on(&model.base_url(), &url);
    let mut p = moved.start(&[]);
    p.ready().await;
    let t = p.finished(&task).await;
    assert_eq!(t["answer"], "answer to: what is 6 * 7?", "{t}");
    assert!(!t["steps"].as_array().expect("steps").is_empty(), "{t}");
    let (status, v) = p.post(&format!("/v1/jobs/{job_id}/run"), json!({})).await;
    assert!(status.is_success(), "{v}");
    let (_, runs) = p.get(&format!("/v1/jobs/{job_id}/runs")).await;
    let ids: Vec<i64> = runs["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|r| r["id"].as_i64())
        .collect();
    assert_eq!(ids.len(), 2, "{runs}");
    assert!(ids[0] > ids[1], "a new run reused a copied id: {runs}");
    let (_, found) = p.get("/v1/memory?q=oolong").await;
    assert!(found.to_string().contains("oolong"), "{found}");
    p.stop().await;

    // The same data dir switched to the copy: its memory index followed the SQLite
    // database's changes, so it rebuilds from the facts (saying why) and finds the fact.
    let yaml = std::fs::read_to_string(site.config()).expect("settings");
    std::fs::write(site.config(), format!("{yaml}storage:\n  url: \"{url}\"\n"))
        .expect("settings written");
    let mut d = site.start(&[]);
    d.ready().await;
    let (_, found) = d.get("/v1/memory?q=oolong").await;
    assert!(found.to_string().contains("oolong"), "{found}");
    d.wait_log("memory index followed another database").await;
    // And by meaning, from the copied vector: nothing was embedded again.
    crate::meaning::found_by_meaning(&d, "oolong tea").await;
    assert_eq!(psql(&db, "SELECT COUNT(*) FROM fact_vectors").await, "1");
    d.stop().await;
}
