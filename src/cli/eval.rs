//! `eval`: run the regression cases (the starter suite of `evals/`, then the person's own) in
//! throwaway data dirs, print a table — case, verdict, model calls, tokens, seconds, and why a
//! case failed — and exit 1 when any failed. The run is recorded in the data dir's database
//! (shown by `GET /v1/evals` and the dashboard's `/evals`); a profile whose every case of the
//! whole suite passed has the model it served verified, and the jobs held for a change to it
//! resume. A run narrowed by `--case` verifies nothing.
//!
//! Must not: hold the run's logic (`hermes_surfaces::eval` has it); it chooses, prints and exits.

use super::EvalArgs;
use super::render::print_json;
use super::table::{Table, cell};
use hermes_config::Config;
use hermes_engine::llm::Gateway;
use hermes_store::{EvalResult, EvalTrigger, EvalVerdict, Store};
use hermes_surfaces::eval::{self, EvalRequest};
use std::process::ExitCode;

pub async fn eval(config: Config, args: EvalArgs) -> anyhow::Result<ExitCode> {
    let all = eval::load(config.evals_dir.as_deref())?;
    let suite = all.len();
    let cases = eval::choose(all, &args.case);
    let narrowed = cases.len() < suite;
    if cases.is_empty() {
        anyhow::bail!(
            "no regression case matches {}; the names are those in evals/*.yaml{}",
            args.case.join(", "),
            config
                .evals_dir
                .as_deref()
                .map(|d| format!(" and {}/*.yaml", d.display()))
                .unwrap_or_default()
        );
    }
    // Before anything is said or opened: a mistyped --profile is the whole answer.
    eval::check_profiles(&config.settings, args.profile.as_deref(), &cases)?;
    let store = Store::open_configured(
        &config.data_dir,
        &config.settings.storage.url,
        Default::default(),
    )
    .await?;
    let gateway = Gateway::new(&config.settings.model)?.with_settings_source(&config.source);
    if !args.json {
        errln!(
            "running {} regression case(s), each in a throwaway data dir",
            cases.len()
        );
    }
    let json = args.json;
    let show = move |r: &EvalResult| {
        if !json {
            errln!(
                "  {} {} ({:.1} s)",
                r.case_name,
                r.verdict,
                r.duration_ms as f64 / 1000.0
            );
        }
    };
    let request = EvalRequest {
        config: &config,
        store: &store,
        gateway: &gateway,
        profile: args.profile.clone(),
        cases,
        narrowed,
        trigger: EvalTrigger::Cli,
        scheduler: None,
        model_retry: None,
    };
    let report = eval::run(request, &show).await?;
    store.close().await;
    if args.json {
        print_json(&report.run)?;
    } else {
        out!("{}", results_table(&report.run.results));
        let run = &report.run;
        outln!(
            "eval run {}: {} passed, {} failed (profile {}, model {})",
            run.id,
            run.passed,
            run.failed,
            run.profile,
            run.identity.as_deref().unwrap_or("not told by its server")
        );
        for (profile, identity) in &report.verified {
            outln!("verified: profile {profile} serving {identity}");
        }
        if report.narrowed && report.all_passed() {
            outln!(
                "verified nothing: --case ran {} of the {suite} cases; run `hermes-agent eval` without --case to verify the model",
                run.results.len()
            );
        }
        if !report.resumed.is_empty() {
            outln!(
                "resumed the jobs held for the model change: {}",
                report.resumed.join(", ")
            );
        }
    }
    Ok(if report.all_passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The run's table: one row per case.
pub fn results_table(results: &[EvalResult]) -> String {
    let mut table = Table::new(&["CASE", "VERDICT", "CALLS", "TOKENS", "SECONDS", "WHY"]);
    for r in results {
        let verdict = match r.verdict {
            EvalVerdict::Passed => "passed",
            EvalVerdict::Failed => "FAILED",
        };
        table.row(vec![
            cell(&r.case_name, 32),
            verdict.to_string(),
            r.model_calls.to_string(),
            r.tokens.to_string(),
            format!("{:.1}", r.duration_ms as f64 / 1000.0),
            cell(r.why.as_deref().unwrap_or(""), 160),
        ]);
    }
    table.render()
}
