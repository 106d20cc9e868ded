//! A PostgreSQL server whose disk really fills up: the test's database lives in a tablespace on
//! a small tmpfs mounted for the test (as root, as here and in CI), filled by a file written
//! until the kernel answers ENOSPC. PostgreSQL then fails the write that extends a table with
//! SQLSTATE 53100 (`disk_full`): the daemon must refuse the task with a 503 that says so, never
//! accept it, and `/healthz` must say `disk full`; once space is back, tasks are accepted again.

use super::{accepted, cluster};
use crate::common::echo_model;
use hermes_engine::llm::scripted::ScriptedModel;
use reqwest::StatusCode;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A tmpfs mounted on a temp dir, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// `None` where no tmpfs can be mounted (not root).
    fn mount() -> Option<SmallDisk> {
        let dir = tempfile::tempdir().expect("temp dir");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16m,mode=0700", "hermes-pg-test"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            return None;
        }
        let owned = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        assert!(owned, "chown postgres {}", dir.path().display());
        Some(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn filler(&self) -> PathBuf {
        self.path().join("filler")
    }

    /// Take every free block: a file written until ENOSPC.
    fn fill(&self) {
        crate::common::fill_until_full(&self.filler());
    }

    fn free(&self) {
        std::fs::remove_file(self.filler()).expect("filler removed");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazily: the server may still hold the tablespace's files open.
        let _ = Command::new("umount").arg("-l").arg(self.path()).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_full_disk_postgres_refuses_a_task_with_a_503_and_healthz_says_disk_full() {
    let Some(disk) = SmallDisk::mount() else {
        // Without root no tmpfs can be mounted; the read-only and unreachable faults are tested
        // without it (mod.rs).
        eprintln!("postgres::faults: no tmpfs (not root); the full-disk case is skipped");
        return;
    };
    let model = ScriptedModel::start_with(echo_model).await;
    let location = disk.path().display().to_string();
    // A server of its own: while the tmpfs is full, any backend that evicts a dirty page of
    // this database fails its own statement with `disk_full`, whatever database it serves, so
    // on the shared cluster the other tests' daemons would meet this test's full disk.
    let (own, db) = tokio::task::spawn_blocking(move || {
        let c = cluster::Cluster::start().unwrap_or_else(|e| panic!("{e}"));
        let n = c.create_database();
        let space = format!("small_{n}");
        c.psql(
            "postgres",
            &format!("CREATE TABLESPACE {space} LOCATION '{location}'"),
        )
        .and_then(|_| {
            c.psql(
                "postgres",
                &format!("ALTER DATABASE {n} SET TABLESPACE {space}"),
            )
        })
        .unwrap_or_else(|e| panic!("{e}"));
        (c, n)
    })
    .await
    .expect("the cluster's thread");
    let site = super::site_on(&model.base_url(), &own.url(&db));
    let mut d = site.start(&[]);
    d.ready().await;

    disk.fill();
    let (status, v) = d.post("/v1/tasks", json!({"task": "no room"})).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(v["error"]["code"], "storage_unavailable", "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("disk full"), "{v}");
    let h = d
        .health_until("status degraded", |h| h["status"] == "degraded")
        .await;
    assert!(
        h["storage"]
            .as_str()
            .is_some_and(|s| s.contains("disk full")),
        "{h}"
    );
    // Nothing was accepted, so nothing is there.
    let (_, list) = d.get("/v1/tasks").await;
    assert_eq!(list["tasks"].as_array().map(Vec::len), Some(0), "{list}");

    disk.free();
    let id = accepted(&d, "room again").await;
    assert_eq!(d.finished(&id).await["state"], "succeeded");
    d.stop().await;
}
