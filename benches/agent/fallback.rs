//! The time a fallback adds to a model call: `fast` (the primary) falls back to `pro` (a
//! scripted server that answers at once), and a call to `fast` is timed against a call made
//! straight to `pro`. The primary either refuses connections (nothing listens on its port) or
//! hangs (accepts, never answers: each attempt bounded by its `timeout_s`). Measured with the
//! gateway's default retries (the profile's own retries come before its fallback), without
//! retries (the chain's own cost), and within `model.fallback_cooldown_s` (the failed primary
//! is asked after its fallback, so a call costs what a direct one does).

use crate::common::{figure, percentile};
use anyhow::{Context, Result, bail};
use hermes_config::{ModelSettings, Profile};
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_engine::llm::{DEFAULT_RETRY, Gateway, Message};
use hermes_store::util::RetryPolicy;
use std::time::{Duration, Instant};

/// A hanging primary's `timeout_s` (the smallest a profile takes).
const HANG_TIMEOUT_S: u64 = 1;

pub async fn run() -> Result<()> {
    println!(
        "\n== fallback: the time a fallback adds to a model call (primary → answering fallback)"
    );
    let backup = ScriptedModel::start_with(|_| Reply::text("ok")).await;
    let hanging = ScriptedModel::start_with(|_| {
        Reply::Delay(Duration::from_secs(3600), Box::new(Reply::text("late")))
    })
    .await;
    let refused = refused_url()?;

    let direct = times(30, || async {
        let gw = gateway(&refused, &backup.base_url(), 5, DEFAULT_RETRY)?;
        timed(&gw, "pro").await
    })
    .await?;
    figure(
        "direct call to the fallback on a fresh gateway (baseline), p50",
        ms(percentile(&direct, 50.0)),
    );
    let base = percentile(&direct, 50.0);

    let no_retry = RetryPolicy {
        max_retries: 0,
        ..DEFAULT_RETRY
    };
    for (what, url, timeout_s, retry, n) in [
        (
            "refuses connections, no retries",
            refused.as_str(),
            5,
            no_retry,
            30,
        ),
        (
            "refuses connections, default retries (3)",
            refused.as_str(),
            5,
            DEFAULT_RETRY,
            5,
        ),
        (
            "hangs (timeout_s 1), no retries",
            &hanging.base_url(),
            HANG_TIMEOUT_S,
            no_retry,
            5,
        ),
        (
            "hangs (timeout_s 1), default retries (3)",
            &hanging.base_url(),
            HANG_TIMEOUT_S,
            DEFAULT_RETRY,
            3,
        ),
    ] {
        let first = times(n, || async {
            let gw = gateway(url, &backup.base_url(), timeout_s, retry)?;
            timed(&gw, "fast").await
        })
        .await?;
        println!("  primary {what} ({n} calls, each on a fresh gateway):");
        figure(
            "  added to the call, p50",
            ms(percentile(&first, 50.0) - base),
        );
        figure(
            "  added to the call, max",
            ms(percentile(&first, 100.0) - base),
        );
    }

    // Within the cooldown: one failing call first, then the primary is asked after `pro`.
    // Compared with direct calls on the same warm gateway (its connection to `pro` is open).
    let gw = gateway(&refused, &backup.base_url(), 5, no_retry)?;
    timed(&gw, "fast").await?;
    let (mut cooling, mut warm) = (Vec::new(), Vec::new());
    for _ in 0..50 {
        cooling.push(timed(&gw, "fast").await?);
        warm.push(timed(&gw, "pro").await?);
    }
    figure(
        "direct call to the fallback on a warm gateway, p50",
        ms(percentile(&warm, 50.0)),
    );
    figure(
        "within the cooldown (primary asked last): added, p50",
        ms(percentile(&cooling, 50.0) - percentile(&warm, 50.0)),
    );
    backup.stop().await;
    drop(hanging);
    Ok(())
}

/// A loopback URL nothing listens on: a port bound, then released.
fn refused_url() -> Result<String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("bind a loopback port")?;
    let port = l.local_addr()?.port();
    drop(l);
    Ok(format!("http://127.0.0.1:{port}/v1"))
}

fn gateway(primary: &str, backup: &str, timeout_s: u64, retry: RetryPolicy) -> Result<Gateway> {
    let mut s = ModelSettings::default();
    s.profiles.clear();
    let profile = |url: &str, model: &str, timeout_s: u64, fallback: Vec<String>| Profile {
        base_url: url.into(),
        model: model.into(),
        timeout_s,
        fallback,
        ..Profile::default()
    };
    s.profiles.insert(
        "fast".into(),
        profile(primary, "primary", timeout_s, vec!["pro".into()]),
    );
    s.profiles
        .insert("pro".into(), profile(backup, "backup", 5, vec![]));
    Ok(Gateway::new(&s)?.with_retry(retry))
}

/// One call's wall time in ms; it must have been answered by the fallback.
async fn timed(gw: &Gateway, profile: &str) -> Result<f64> {
    let t0 = Instant::now();
    let reply = gw.chat(profile, &[Message::user("hello")], &[]).await?;
    let took = t0.elapsed().as_secs_f64() * 1000.0;
    if reply.served.profile != "pro" || reply.content != "ok" {
        bail!(
            "the call was answered by '{}' with '{}', not by the fallback",
            reply.served.profile,
            reply.content
        );
    }
    Ok(took)
}

async fn times<F, Fut>(n: usize, mut one: F) -> Result<Vec<f64>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<f64>>,
{
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(one().await?);
    }
    Ok(out)
}

fn ms(v: f64) -> String {
    format!("{v:.1} ms")
}
