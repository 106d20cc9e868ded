//! Which side of the daemon's client a command talks to: the running daemon if one answers,
//! else the data dir in this process, with the parts built here (by `app::App`, which the
//! client module cannot name).

use hermes_config::Config;
use hermes_engine::agent::JobExecution;
use hermes_store::Origin;
use hermes_surfaces::app::{App, BuildOptions};
use hermes_surfaces::client::{Backend, BuildParts, ClientError, Local, Parts, Remote};
use std::sync::Arc;

pub use hermes_surfaces::client::{DELIVER_NOW, Fired, FoundFact};

/// The daemon if one answers, else the data dir in this process.
pub async fn connect(config: Config) -> Box<dyn Backend> {
    connect_as(config, Origin::Cli).await
}

/// As [`connect`], for requests made on behalf of `origin`: the origin of the tasks, jobs and
/// facts created, through the daemon or on the data dir alike.
pub(crate) async fn connect_as(config: Config, origin: Origin) -> Box<dyn Backend> {
    match Remote::detect(&config).await {
        Some(remote) => Box::new(remote.acting_for(origin)),
        None => Box::new(Local::new(config, build_parts()).acting_for(origin)),
    }
}

/// Every part on the data dir, with job firings run in this process.
fn build_parts() -> BuildParts {
    Box::new(|config, memory| {
        Box::pin(async move {
            let options = BuildOptions {
                memory,
                ..Default::default()
            };
            let app = App::build_with(config, JobExecution::Direct, options)
                .await
                .map_err(|e| ClientError::Setup(e.to_string()))?;
            Ok(Parts {
                store: app.store.clone(),
                agent: app.agent.clone(),
                scheduler: app.scheduler.clone(),
                notifier: app.notifier.clone(),
                sources: Arc::new(app.mcp.clone()),
                serving: app.serving.clone(),
            })
        })
    })
}
