//! The database file taken from under a running daemon: deleted (someone resetting by hand) or
//! replaced (a backup moved into place). The daemon's connections still write to the file it
//! opened, which no later start will read: it must stop and say so, not go on accepting work
//! whose record is thrown away.

use crate::common::echo_model;
use crate::daemon::Site;
use crate::process::PATIENCE;
use hermes_engine::llm::scripted::ScriptedModel;
use hermes_store::DB_FILE;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_whose_database_file_is_deleted_or_replaced_stops_and_says_why() {
    let model = ScriptedModel::start_with(echo_model).await;
    let site = Site::new(&model.base_url(), &[], &[]);
    let db = site.data().join(DB_FILE);

    let mut d = site.start(&[]);
    d.ready().await;
    let (status, done) = d
        .post("/v1/tasks", json!({"task": "say hi", "wait": true}))
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    // A copy of the database as it is now, to move into place later as a restored backup.
    let backup = site.dir.path().join("backup.db");
    let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&format!(
        "sqlite://{}",
        db.display()
    ))
    .await
    .expect("a connection of the test's own");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "VACUUM INTO '{}'",
        backup.display()
    )))
    .execute(&mut conn)
    .await
    .expect("a backup");
    sqlx::Connection::close(conn).await.expect("closed");

    std::fs::remove_file(&db).expect("delete the database");
    let status = d.exited(PATIENCE).await;
    assert_eq!(status.code(), Some(1), "{}", d.log());
    let log = d.log();
    assert!(
        log.contains(&format!("the database {} was deleted", db.display()))
            && log.contains("Start it again for a new, empty database"),
        "{log}"
    );

    // Started again, it makes a new database; the backup moved over it while it runs.
    let mut d = site.start(&[]);
    d.ready().await;
    std::fs::rename(&backup, &db).expect("move the backup into place");
    let status = d.exited(PATIENCE).await;
    assert_eq!(status.code(), Some(1), "{}", d.log());
    assert!(
        d.log()
            .contains("removed the lost database's write-ahead file"),
        "{}",
        d.log()
    );
    assert!(d.log().contains("was replaced"), "{}", d.log());

    // And the next start reads the restored file: the task done before the backup is there.
    let mut d = site.start(&[]);
    d.ready().await;
    let t = d.task(done["id"].as_str().expect("an id")).await;
    assert_eq!(t["state"], "succeeded", "{t}");
    d.stop().await;
}
