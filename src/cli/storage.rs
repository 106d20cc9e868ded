//! `hermes-agent storage migrate --to postgres://…`: copy the data dir's SQLite database into an
//! empty PostgreSQL database, check the counts, and say how to switch `storage.url`.
//!
//! Must not: change the data dir's database (it stays as it was, a backup), or start anything.

use anyhow::{Context as _, bail};
use hermes_config::Config;
use hermes_store::{Store, StoreOptions, redact_url};
use std::process::ExitCode;

pub async fn migrate(config: Config, to: &str) -> anyhow::Result<ExitCode> {
    let to = to.trim();
    hermes_store::parse_url(to)?;
    if !config.settings.storage.url.trim().is_empty() {
        bail!(
            "storage.url is already set ({}): this daemon's data is in PostgreSQL; `storage migrate` copies a data dir's SQLite database (empty the setting to migrate from {})",
            redact_url(&config.settings.storage.url),
            config.data_dir.display()
        );
    }
    let db = config.data_dir.join(hermes_store::DB_FILE);
    if !db.is_file() {
        bail!(
            "no database to migrate: {} does not exist (choose the data dir with --data-dir)",
            db.display()
        );
    }
    // Held while copying: a daemon writing meanwhile would leave rows behind.
    let _data_dir = hermes_surfaces::daemon::lock_data_dir(&config.data_dir).context(
        "stop the daemon first (`systemctl --user stop hermes-agent`); the copy must see every row",
    )?;
    let source = Store::open(&config.data_dir).await?;
    let target = Store::open_postgres(to, StoreOptions::default()).await?;
    // No daemon may start on the target before the copy is in.
    let _target = target.lock_for_maintenance().await?;
    errln!(
        "copying {} into {} …",
        db.display(),
        target.path().display()
    );
    let started = std::time::Instant::now();
    let counts = source.copy_into(&target).await?;
    let total: i64 = counts.iter().map(|c| c.target).sum();
    outln!("{:<18} {:>10}", "table", "rows");
    for c in &counts {
        outln!("{:<18} {:>10}", c.table, c.target);
    }
    outln!(
        "copied {total} rows in {} tables in {:.1} s; every table's count matches the data dir's",
        counts.len(),
        started.elapsed().as_secs_f64()
    );
    outln!("not copied (each starts afresh on the target):");
    for (table, why) in hermes_store::NOT_COPIED {
        outln!("  {table:<16} {why}");
    }
    outln!(
        "to use it, set in your settings.yaml (the password as ${{VAR}} from the environment, or PGPASSWORD), then restart the daemon:\n  storage:\n    url: {}",
        redact_url(to)
            .replace(":***@", ":${HERMES_DB_PASSWORD}@")
            .replace("password=***", "password=${HERMES_DB_PASSWORD}")
    );
    outln!(
        "{} is left as it was (a backup); the memory index stays in the data dir",
        db.display()
    );
    source.close().await;
    target.close().await;
    Ok(ExitCode::SUCCESS)
}
