//! Eval runs and their per-case results (`eval_runs`, `eval_results`): what `hermes-agent eval`
//! and the daemon's background evals record, and `GET /v1/evals` and the `/evals` page show.

use super::aggregates::Evals;
use super::{EvalTrigger, EvalVerdict, Result, Store, TaskState, found, limit_or, now};
use super::{query, query_as};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One run of the regression cases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct EvalRun {
    pub id: i64,
    /// The profile asked for (cases may name their own).
    pub profile: String,
    /// That profile's identity when the run started.
    pub identity: Option<String>,
    pub trigger: EvalTrigger,
    pub started_at: DateTime<Utc>,
    /// `None` while it runs (or when the process running it died).
    pub finished_at: Option<DateTime<Utc>>,
    pub passed: i64,
    pub failed: i64,
    #[sqlx(skip)]
    #[serde(default)]
    pub results: Vec<EvalResult>,
}

/// How one case came out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct EvalResult {
    #[serde(rename = "case")]
    pub case_name: String,
    pub profile: String,
    pub identity: Option<String>,
    pub verdict: EvalVerdict,
    pub model_calls: i64,
    pub tokens: i64,
    pub duration_ms: i64,
    /// Why it failed, in words.
    pub why: Option<String>,
    pub state: Option<TaskState>,
    pub answer: Option<String>,
}

impl Store {
    async fn eval_results(&self, run_id: i64) -> Result<Vec<EvalResult>> {
        self.all(
            query_as(
                "SELECT case_name, profile, identity, verdict, model_calls, tokens, duration_ms, \
                 why, state, answer FROM eval_results WHERE run_id = ? ORDER BY seq",
            )
            .bind(run_id),
        )
        .await
    }
}

impl Evals<'_> {
    /// A run begins; its id.
    pub async fn start_run(
        self,
        profile: &str,
        identity: Option<&str>,
        trigger: EvalTrigger,
    ) -> Result<i64> {
        let insert = query_as(
            "INSERT INTO eval_runs (profile, identity, trigger, started_at) VALUES (?, ?, ?, ?) \
             RETURNING id",
        )
        .bind(profile)
        .bind(identity)
        .bind(trigger)
        .bind(now());
        let (id,): (i64,) = self.store.inserted(insert).await?;
        Ok(id)
    }

    /// One case's result, as the `seq`-th of its run.
    pub async fn add_result(self, run_id: i64, seq: i64, r: &EvalResult) -> Result<()> {
        let insert = query(
            "INSERT INTO eval_results (run_id, seq, case_name, profile, identity, verdict, \
             model_calls, tokens, duration_ms, why, state, answer) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(run_id)
        .bind(seq)
        .bind(&r.case_name)
        .bind(&r.profile)
        .bind(&r.identity)
        .bind(r.verdict)
        .bind(r.model_calls)
        .bind(r.tokens)
        .bind(r.duration_ms)
        .bind(&r.why)
        .bind(r.state)
        .bind(&r.answer);
        self.store.run(insert).await
    }

    /// The run is over: its counts, from its results.
    pub async fn finish_run(self, run_id: i64) -> Result<EvalRun> {
        let finish = query(
            "UPDATE eval_runs SET finished_at = ?1, \
             passed = (SELECT COUNT(*) FROM eval_results WHERE run_id = ?2 AND verdict = 'passed'), \
             failed = (SELECT COUNT(*) FROM eval_results WHERE run_id = ?2 AND verdict = 'failed') \
             WHERE id = ?2",
        )
        .bind(now())
        .bind(run_id);
        self.store.run(finish).await?;
        self.run(run_id).await
    }

    /// One run with its results.
    pub async fn run(self, id: i64) -> Result<EvalRun> {
        let sql = select!(eval_runs, "WHERE id = ?");
        let run: Option<EvalRun> = self.store.first(query_as(sql).bind(id)).await?;
        let mut run = found(run, "eval run", id)?;
        run.results = self.store.eval_results(id).await?;
        Ok(run)
    }

    /// The newest runs first, each with its results.
    pub async fn runs(self, limit: i64) -> Result<Vec<EvalRun>> {
        let sql = select!(eval_runs, "ORDER BY id DESC LIMIT ?");
        let mut runs: Vec<EvalRun> = self
            .store
            .all(query_as(sql).bind(limit_or(limit, 20)))
            .await?;
        for run in &mut runs {
            run.results = self.store.eval_results(run.id).await?;
        }
        Ok(runs)
    }
}
