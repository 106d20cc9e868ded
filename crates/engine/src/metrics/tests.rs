use super::*;

/// The value of the sample line `series` (name and labels exactly as rendered), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// One observation of every kind.
fn observe_each(m: &Metrics) {
    m.observe_task("succeeded", "api", Duration::from_millis(1500));
    m.observe_model_call(
        "default",
        ModelOutcome::Ok,
        Duration::from_millis(30),
        120,
        7,
    );
    m.observe_tool_call(Some("web_fetch"), "ok");
    m.observe_job_firing("fired", 1, Some(Duration::from_millis(20)));
    m.observe_delivery_sent("email");
    m.observe_delivery_failure("email", DeliveryFailure::Retry);
}

#[test]
fn every_family_is_rendered_in_the_prometheus_text_format_with_the_node_id() {
    let m = Metrics::new("3f2a9c1e-0000-4000-8000-000000000001");
    // A family with no series yet is left out altogether.
    let quiet = m.render(&Reading::default());
    assert!(!quiet.contains("hermes_tool_calls"), "{quiet}");
    observe_each(&m);
    let text = m.render(&Reading {
        tasks: Some(vec![("pending", "api", 1)]),
        outbox_pending: Some(0),
        open_circuits: 0,
    });
    for name in [
        "hermes_node_info",
        "hermes_tasks",
        "hermes_task_duration_seconds",
        "hermes_model_call_duration_seconds",
        "hermes_tokens_in_total",
        "hermes_tokens_out_total",
        "hermes_tool_calls_total",
        "hermes_circuit_breakers_open",
        "hermes_job_firings_total",
        "hermes_job_firing_lateness_seconds",
        "hermes_outbox_pending",
        "hermes_outbox_delivery_failures_total",
        "hermes_outbox_sent_total",
    ] {
        assert!(text.contains(&format!("# TYPE {name} ")), "{name}:\n{text}");
    }
    let version = env!("CARGO_PKG_VERSION");
    let node = format!(
        "hermes_node_info{{node_id=\"3f2a9c1e-0000-4000-8000-000000000001\",version=\"{version}\"}}"
    );
    assert_eq!(sample(&text, &node), Some(1.0), "{text}");
    // The text format 0.0.4 ends without OpenMetrics' `# EOF`.
    assert!(!text.contains("# EOF"), "{text}");
}

#[test]
fn observations_land_in_their_series() {
    let m = Metrics::default();
    observe_each(&m);
    m.observe_model_call(
        "default",
        ModelOutcome::Ok,
        Duration::from_millis(30),
        80,
        3,
    );
    // A failed call has no usage: its duration counts, no tokens.
    m.observe_model_call(
        "default",
        ModelOutcome::Error,
        Duration::from_secs(3),
        99,
        99,
    );
    m.observe_tool_call(Some("web_fetch"), "timeout");
    m.observe_job_firing("missed", 12, None);
    let text = m.render(&Reading::default());
    for (series, want) in [
        (
            "hermes_task_duration_seconds_count{state=\"succeeded\",origin=\"api\"}",
            1.0,
        ),
        (
            "hermes_task_duration_seconds_bucket{state=\"succeeded\",origin=\"api\",le=\"2.5\"}",
            1.0,
        ),
        (
            "hermes_task_duration_seconds_bucket{state=\"succeeded\",origin=\"api\",le=\"1\"}",
            0.0,
        ),
        (
            "hermes_model_call_duration_seconds_count{profile=\"default\",outcome=\"ok\"}",
            2.0,
        ),
        (
            "hermes_model_call_duration_seconds_count{profile=\"default\",outcome=\"error\"}",
            1.0,
        ),
        ("hermes_tokens_in_total{profile=\"default\"}", 200.0),
        ("hermes_tokens_out_total{profile=\"default\"}", 10.0),
        (
            "hermes_tool_calls_total{tool=\"web_fetch\",outcome=\"ok\"}",
            1.0,
        ),
        (
            "hermes_tool_calls_total{tool=\"web_fetch\",outcome=\"timeout\"}",
            1.0,
        ),
        ("hermes_job_firings_total{outcome=\"fired\"}", 1.0),
        ("hermes_job_firings_total{outcome=\"missed\"}", 12.0),
        ("hermes_job_firing_lateness_seconds_count", 1.0),
        (
            "hermes_job_firing_lateness_seconds_bucket{le=\"0.05\"}",
            1.0,
        ),
        ("hermes_outbox_sent_total{channel=\"email\"}", 1.0),
        (
            "hermes_outbox_delivery_failures_total{channel=\"email\",kind=\"retry\"}",
            1.0,
        ),
    ] {
        assert_eq!(sample(&text, series), Some(want), "{series}:\n{text}");
    }
}

#[test]
fn names_a_model_invents_share_one_series() {
    let m = Metrics::default();
    for i in 0..1000 {
        // The registry passes `None` for a name it does not have, whatever the name.
        let _invented = format!("tool_{i}");
        m.observe_tool_call(None, "unknown");
    }
    let text = m.render(&Reading::default());
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("hermes_tool_calls_total{"))
        .collect();
    assert_eq!(
        series,
        ["hermes_tool_calls_total{tool=\"unknown\",outcome=\"unknown\"} 1000"]
    );
}

#[test]
fn scrape_time_gauges_follow_the_reading_and_drop_what_is_gone() {
    let m = Metrics::default();
    let first = m.render(&Reading {
        tasks: Some(vec![("pending", "api", 3), ("succeeded", "job", 5)]),
        outbox_pending: Some(4),
        open_circuits: 2,
    });
    assert_eq!(
        sample(&first, "hermes_tasks{state=\"pending\",origin=\"api\"}"),
        Some(3.0)
    );
    assert_eq!(sample(&first, "hermes_outbox_pending"), Some(4.0));
    assert_eq!(sample(&first, "hermes_circuit_breakers_open"), Some(2.0));

    // The pending tasks ran; the database could not say how many notices wait.
    let second = m.render(&Reading {
        tasks: Some(vec![("succeeded", "job", 5), ("succeeded", "api", 3)]),
        outbox_pending: None,
        open_circuits: 0,
    });
    assert_eq!(
        sample(&second, "hermes_tasks{state=\"pending\",origin=\"api\"}"),
        None,
        "{second}"
    );
    assert_eq!(
        sample(&second, "hermes_tasks{state=\"succeeded\",origin=\"api\"}"),
        Some(3.0)
    );
    assert_eq!(sample(&second, "hermes_outbox_pending"), None, "{second}");
    assert_eq!(sample(&second, "hermes_circuit_breakers_open"), Some(0.0));
}

#[test]
fn the_node_id_is_made_once_and_kept_in_the_data_dir() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let first = node_id(&data);
    assert!(uuid::Uuid::parse_str(&first).is_ok(), "{first}");
    assert_eq!(node_id(&data), first);
    let kept = std::fs::read_to_string(data.join(NODE_ID_FILE)).expect("the file");
    assert_eq!(kept.trim(), first);

    // Another data dir is another node.
    assert_ne!(node_id(&dir.path().join("other")), first);

    // A damaged file is replaced, not trusted.
    std::fs::write(data.join(NODE_ID_FILE), "not an id").expect("write");
    let fresh = node_id(&data);
    assert_ne!(fresh, first);
    assert_eq!(node_id(&data), fresh);
}

#[test]
fn processes_starting_together_on_a_fresh_data_dir_agree_on_one_id() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let start = std::sync::Barrier::new(16);
    let ids: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    node_id(&data)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a thread"))
            .collect()
    });
    let kept = std::fs::read_to_string(data.join(NODE_ID_FILE)).expect("the file");
    assert!(ids.iter().all(|id| id == kept.trim()), "{ids:?} vs {kept}");
    let left: Vec<_> = std::fs::read_dir(&data)
        .expect("the data dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, [NODE_ID_FILE], "no temporary file is left behind");
}
