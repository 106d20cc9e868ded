//! The commands other than `serve` and `config check`. Each goes through the daemon's API when
//! one is up (it owns the memory index and the live scheduler), else works on the data dir.

use super::client::Daemon;
use super::{JobsCmd, MemoryCmd, RunArgs, TasksCmd, render};
use crate::agent::{RunOptions, Submit};
use crate::app::{App, JobExecution};
use crate::config::Config;
use crate::memory::LongTerm;
use crate::store::{Origin, Store, Task, TaskFilter, TaskRecord, TaskState};
use reqwest::Method;
use serde_json::{Value, json};
use std::process::ExitCode;
use std::time::Duration;
use tokio::sync::mpsc;

fn exit_for(state: TaskState) -> ExitCode {
    if state == TaskState::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Print a finished task the way `run` promises: the answer on stdout, problems on stderr.
fn print_outcome(record: &TaskRecord, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        print_json(record)?;
    } else {
        let t = &record.task;
        match (&t.answer, t.state) {
            (Some(a), TaskState::Succeeded) => println!("{a}"),
            _ => eprintln!(
                "task {} {}{}: {}",
                t.id,
                t.state,
                t.reason.map(|r| format!(" ({r})")).unwrap_or_default(),
                t.error.as_deref().unwrap_or("no answer")
            ),
        }
    }
    Ok(exit_for(record.task.state))
}

pub async fn run(config: Config, args: RunArgs) -> anyhow::Result<ExitCode> {
    let daemon_up = Daemon::detect(&config.settings).await.is_some();
    let app = App::build(config, JobExecution::Direct).await?;
    let claimed = app
        .agent
        .create_claimed(Submit {
            task: args.task,
            origin: Origin::Cli,
            profile: args.profile,
            ..Default::default()
        })
        .await?;
    let task = claimed.task().clone();
    eprintln!("task {} ({} profile)", task.id, task.profile);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let printer = tokio::spawn(async move {
        while let Some(step) = rx.recv().await {
            eprintln!("{}", render::step_line(&step));
        }
    });
    let opts = RunOptions {
        observer: Some(tx),
        ..Default::default()
    };
    let exec = app.agent.run_claimed(claimed, opts);
    tokio::pin!(exec);
    let done = tokio::select! {
        r = &mut exec => r?,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("interrupted: cancelling task {}", task.id);
            app.agent.cancel(&task.id).await?;
            exec.await?
        }
    };
    let _ = printer.await;
    // Notices the task queued: with no daemon to send them, send them now (they stay queued
    // in the outbox, and are retried by the daemon, if this fails).
    if !daemon_up && !app.store.notices_for_task(&done.id).await?.is_empty() {
        let sent = tokio::time::timeout(Duration::from_secs(60), app.notifier.deliver_due())
            .await
            .unwrap_or(0);
        eprintln!("delivered {sent} notice(s)");
    }
    let record = app
        .store
        .task_record(&done.id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("task {} disappeared from the store", done.id))?;
    print_outcome(&record, args.json)
}

pub async fn tasks(config: Config, cmd: TasksCmd) -> anyhow::Result<ExitCode> {
    if let Some(d) = Daemon::detect(&config.settings).await {
        return match cmd {
            TasksCmd::List { state, limit, json } => {
                let mut path = format!("/v1/tasks?limit={limit}");
                if let Some(s) = state {
                    path.push_str(&format!("&state={s}"));
                }
                let (_, v) = d.call(Method::GET, &path, None).await?;
                if json {
                    print_json(&v)?;
                } else {
                    let list: Vec<Task> = serde_json::from_value(v["tasks"].clone())?;
                    print!("{}", render::task_table(&list));
                }
                Ok(ExitCode::SUCCESS)
            }
            TasksCmd::Show { id, json } => {
                let (_, v) = d
                    .call(Method::GET, &format!("/v1/tasks/{}", seg(&id)), None)
                    .await?;
                if json {
                    print_json(&v)?;
                } else {
                    let r: TaskRecord = serde_json::from_value(v)?;
                    print!("{}", render::task_timeline(&r.task, &r.steps, &r.notices));
                }
                Ok(ExitCode::SUCCESS)
            }
        };
    }
    let store = Store::open(&config.data_dir).await?;
    match cmd {
        TasksCmd::List { state, limit, json } => {
            let list = store
                .list_tasks(&TaskFilter {
                    state,
                    limit,
                    ..Default::default()
                })
                .await?;
            if json {
                print_json(&json!({ "tasks": list }))?;
            } else {
                print!("{}", render::task_table(&list));
            }
        }
        TasksCmd::Show { id, json } => {
            let Some(record) = store.task_record(&id).await? else {
                anyhow::bail!("no task '{id}'; `hermes-agent tasks list` shows the ids");
            };
            if json {
                print_json(&record)?;
            } else {
                print!(
                    "{}",
                    render::task_timeline(&record.task, &record.steps, &record.notices)
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_jobs(v: &Value) {
    let Some(jobs) = v.as_array().filter(|j| !j.is_empty()) else {
        println!(
            "no jobs — add one with `hermes-agent jobs add \"TASK\" --schedule \"0 8 * * *\"`"
        );
        return;
    };
    println!(
        "{:<18}  {:<16}  {:<14}  {:<20}  LAST RUN",
        "ID", "NAME", "SCHEDULE", "NEXT (UTC)"
    );
    for j in jobs {
        let s = |k: &str| j.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let last = match j.get("last_run") {
            Some(r) if r.is_object() => format!(
                "{} {}{}",
                r.get("outcome").and_then(Value::as_str).unwrap_or(""),
                r.get("fired_at").and_then(Value::as_str).unwrap_or(""),
                r.get("reason")
                    .and_then(Value::as_str)
                    .map(|x| format!(" ({x})"))
                    .unwrap_or_default()
            ),
            _ => "never".into(),
        };
        println!(
            "{:<18}  {:<16}  {:<14}  {:<20}  {last}",
            s("id"),
            render::one_line(&s("name"), 16),
            s("schedule"),
            render::one_line(&s("next_run_at"), 20)
        );
    }
}

pub async fn jobs(config: Config, cmd: JobsCmd) -> anyhow::Result<ExitCode> {
    if let Some(d) = Daemon::detect(&config.settings).await {
        match cmd {
            JobsCmd::List { json } => {
                let (_, v) = d.call(Method::GET, "/v1/jobs", None).await?;
                if json {
                    print_json(&v)?;
                } else {
                    print_jobs(&v["jobs"]);
                }
            }
            JobsCmd::Add { job, json } => {
                let body = serde_json::to_value(job)?;
                let (_, v) = d.call(Method::POST, "/v1/jobs", Some(body)).await?;
                if json {
                    print_json(&v)?;
                } else {
                    println!(
                        "job {} added; next run {}",
                        v["id"].as_str().unwrap_or("?"),
                        v["next_run_at"].as_str().unwrap_or("none")
                    );
                }
            }
            JobsCmd::Rm { id } => {
                d.call(Method::DELETE, &format!("/v1/jobs/{}", seg(&id)), None)
                    .await?;
                println!("job {id} removed");
            }
            JobsCmd::Run { id } => {
                let (_, v) = d
                    .call(Method::POST, &format!("/v1/jobs/{}/run", seg(&id)), None)
                    .await?;
                let task_id = v["task_id"].as_str().unwrap_or("").to_string();
                eprintln!(
                    "job {id} fired on the daemon at {}: task {task_id}",
                    d.base()
                );
                // Follow it to the end so the person sees the outcome here too.
                loop {
                    let (_, t) = d
                        .call(Method::GET, &format!("/v1/tasks/{}", seg(&task_id)), None)
                        .await?;
                    let r: TaskRecord = serde_json::from_value(t)?;
                    if r.task.state.is_finished() {
                        return print_outcome(&r, false);
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let app = App::build(config, JobExecution::Direct).await?;
    match cmd {
        JobsCmd::List { json } => {
            let jobs = serde_json::to_value(app.scheduler.list().await?)?;
            if json {
                print_json(&json!({ "jobs": jobs }))?;
            } else {
                print_jobs(&jobs);
            }
        }
        JobsCmd::Add { job, json } => {
            let job = app.scheduler.add(job, Origin::Cli).await?;
            let view = app.scheduler.view(job.clone()).await?;
            if json {
                print_json(&view)?;
            } else {
                println!(
                    "job {} added; next run {}",
                    job.id,
                    job.next_run_at
                        .map(|t| t.to_rfc3339())
                        .unwrap_or_else(|| "none".into())
                );
            }
        }
        JobsCmd::Rm { id } => {
            if !app.scheduler.remove(&id).await? {
                anyhow::bail!("no job '{id}'; `hermes-agent jobs list` shows the ids");
            }
            println!("job {id} removed");
        }
        JobsCmd::Run { id } => {
            eprintln!("job {id}: firing in this process (no daemon running)");
            // Runs the task and queues its delivery before returning, so nothing is lost when
            // this process exits.
            let run = app.scheduler.run_now_wait(&id).await?;
            let sent = tokio::time::timeout(Duration::from_secs(60), app.notifier.deliver_due())
                .await
                .unwrap_or(0);
            if sent > 0 {
                eprintln!("delivered {sent} notice(s)");
            }
            let Some(task_id) = run.task_id else {
                anyhow::bail!(
                    "job {id} did not run: {} ({})",
                    serde_json::to_value(run.outcome)?.as_str().unwrap_or("?"),
                    run.reason.as_deref().unwrap_or("no reason recorded")
                );
            };
            let record = app
                .store
                .task_record(&task_id)
                .await?
                .ok_or_else(|| anyhow::anyhow!("task {task_id} disappeared"))?;
            return print_outcome(&record, false);
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn memory(config: Config, cmd: MemoryCmd) -> anyhow::Result<ExitCode> {
    if let Some(d) = Daemon::detect(&config.settings).await {
        match cmd {
            MemoryCmd::Add { text, tags } => {
                let (_, v) = d
                    .call(
                        Method::POST,
                        "/v1/memory",
                        Some(json!({"text": text, "tags": tags})),
                    )
                    .await?;
                println!("{}", v["id"].as_str().unwrap_or("?"));
            }
            MemoryCmd::Search { query, k, json } => {
                let q: String = form_urlencode(&query);
                let (_, v) = d
                    .call(Method::GET, &format!("/v1/memory?q={q}&k={k}"), None)
                    .await?;
                if json {
                    print_json(&v)?;
                } else {
                    print_facts(&v["facts"]);
                }
            }
            MemoryCmd::Forget { id } => {
                d.call(Method::DELETE, &format!("/v1/memory/{}", seg(&id)), None)
                    .await?;
                println!("forgot {id}");
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let store = Store::open(&config.data_dir).await?;
    let memory = LongTerm::open(&config.data_dir, store).await?;
    match cmd {
        MemoryCmd::Add { text, tags } => {
            if text.trim().is_empty() {
                anyhow::bail!("the fact is empty; say what to remember");
            }
            let (fact, how) = memory.remember(&text, &tags, "cli").await?;
            let merged = if matches!(how, crate::store::Upsert::Merged) {
                " (merged with the same fact)"
            } else {
                ""
            };
            println!("{}{merged}", fact.id);
        }
        MemoryCmd::Search { query, k, json } => {
            let found = memory.recall(&query, k).await?;
            let facts: Vec<Value> = found
                .iter()
                .map(|r| {
                    json!({"id": r.fact.id, "text": r.fact.text, "tags": r.fact.tags,
                                "score": r.score, "created_at": r.fact.created_at})
                })
                .collect();
            if json {
                print_json(&json!({ "facts": facts }))?;
            } else {
                print_facts(&Value::Array(facts));
            }
        }
        MemoryCmd::Forget { id } => {
            if !memory.forget(&id).await? {
                anyhow::bail!("no fact '{id}'; `hermes-agent memory search WORDS` shows ids");
            }
            println!("forgot {id}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_facts(facts: &Value) {
    let Some(list) = facts.as_array().filter(|l| !l.is_empty()) else {
        println!("nothing found");
        return;
    };
    for f in list {
        println!(
            "{}  {:.2}  {}",
            f["id"].as_str().unwrap_or(""),
            f["score"].as_f64().unwrap_or(0.0),
            f["text"].as_str().unwrap_or("")
        );
    }
}

/// An id as one URL path segment: `tasks show ../jobs` must not reach another endpoint.
fn seg(id: &str) -> String {
    form_urlencode(id)
}

fn form_urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
