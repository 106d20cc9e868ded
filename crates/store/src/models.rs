//! Which model each profile answers with (`model_identities`), the changes seen
//! (`model_changes`), the jobs held for them, and the model a job last ran with. The eval runs
//! that verify an identity are in `evals.rs`. The job queries here are the jobs' aggregate
//! (`store.jobs().on_profile`, …): what a model change pauses is read beside the change.
//!
//! An identity is the one-line key the gateway makes of what a server told about its model;
//! the store compares keys and never reads them.

use super::aggregates::{Jobs, Models};
use super::{DbRow, query, query_as};
use super::{Job, ModelAction, PauseReason, Result, WithJson, from_json, json_list, now};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One identity a profile's server was seen to serve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct SeenIdentity {
    pub profile: String,
    pub identity: String,
    /// Where the identity came from, in words.
    pub source: String,
    pub first_seen_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
    /// When an eval run in which every case on this profile passed saw it.
    pub verified_at: Option<DateTime<Utc>>,
    pub verified_run: Option<i64>,
}

/// A profile seen answering with an identity other than its verified one (or, before any
/// was verified, other than the one before).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct ModelChange {
    pub id: i64,
    pub profile: String,
    pub old_identity: String,
    pub new_identity: String,
    /// The old identity was verified (else it was only the one seen before).
    pub old_verified: bool,
    pub action: ModelAction,
    /// The jobs paused for it (`hold`). JSON text in the table.
    #[sqlx(skip)]
    pub paused_jobs: Vec<String>,
    /// The eval run started for it (`eval`, `hold`), once recorded.
    pub eval_run_id: Option<i64>,
    pub seen_at: DateTime<Utc>,
    /// Part of a flap: the id of the change told for it, within whose window this one came
    /// (nothing was told, held or run for this one). `None`: a change told on its own.
    #[serde(default)]
    pub flap_of: Option<i64>,
}

impl WithJson for ModelChange {
    fn read_json(self, row: &DbRow) -> Result<ModelChange> {
        let text: String = row.get("paused_jobs")?;
        let owner = format!("model change {}", self.id);
        Ok(ModelChange {
            paused_jobs: from_json(&text, "paused_jobs", &owner)?,
            ..self
        })
    }
}

/// A change to record.
#[derive(Debug, Clone)]
pub struct NewModelChange {
    pub profile: String,
    pub old_identity: String,
    pub new_identity: String,
    pub old_verified: bool,
    pub action: ModelAction,
    /// See [`ModelChange::flap_of`].
    pub flap_of: Option<i64>,
}

/// The columns of `model_changes` that [`ModelChange`] is read from.
macro_rules! change_columns {
    () => {
        "id, profile, old_identity, new_identity, old_verified, action, paused_jobs, \
         eval_run_id, seen_at, flap_of"
    };
}

/// What is known of one profile's model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelStatus {
    pub profile: String,
    /// The identity seen last.
    pub current: Option<SeenIdentity>,
    /// The identity verified last.
    pub verified: Option<SeenIdentity>,
    /// The latest change recorded.
    pub change: Option<ModelChange>,
}

impl ModelStatus {
    /// The change the profile is still on, unverified: what the dashboard's and doctor's badge
    /// shows. `None` once an eval verified the current identity, or when the profile went back
    /// to a verified one.
    pub fn unverified_change(&self) -> Option<&ModelChange> {
        let current = self.current.as_ref()?;
        let change = self.change.as_ref()?;
        (current.verified_at.is_none() && change.new_identity == current.identity).then_some(change)
    }
}

/// The model a job's task last called, and whether its identity is verified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct LastModel {
    pub task_id: String,
    /// The profile that answered.
    pub profile: String,
    /// The model id the server reported.
    pub model: Option<String>,
    pub identity: Option<String>,
    pub at: DateTime<Utc>,
    /// That identity was verified by a passing eval (false when unknown).
    pub verified: bool,
}

impl Models<'_> {
    /// `profile` was seen serving `identity`: recorded when new, its last sighting moved on
    /// otherwise.
    pub async fn note_identity(self, profile: &str, identity: &str, source: &str) -> Result<()> {
        let at = now();
        let upsert = query(
            "INSERT INTO model_identities (profile, identity, source, first_seen_at, last_seen_at) \
             VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (profile, identity) \
             DO UPDATE SET last_seen_at = excluded.last_seen_at, source = excluded.source",
        )
        .bind(profile)
        .bind(identity)
        .bind(source)
        .bind(at);
        self.store.run(upsert).await
    }

    /// One identity of a profile, if it was ever seen.
    pub async fn seen_identity(
        self,
        profile: &str,
        identity: &str,
    ) -> Result<Option<SeenIdentity>> {
        let sql = "SELECT profile, identity, source, first_seen_at, last_seen_at, verified_at, \
                   verified_run FROM model_identities WHERE profile = ? AND identity = ?";
        self.store
            .first(query_as(sql).bind(profile).bind(identity))
            .await
    }

    /// What is known of `profile`'s model (all `None` for a profile never checked).
    pub async fn status(self, profile: &str) -> Result<ModelStatus> {
        let current = self
            .store
            .first(
                query_as(
                    "SELECT profile, identity, source, first_seen_at, last_seen_at, verified_at, \
                     verified_run FROM model_identities WHERE profile = ? \
                     ORDER BY last_seen_at DESC LIMIT 1",
                )
                .bind(profile),
            )
            .await?;
        let verified = self.store
            .first(
                query_as(
                    "SELECT profile, identity, source, first_seen_at, last_seen_at, verified_at, \
                     verified_run FROM model_identities WHERE profile = ? AND verified_at IS NOT NULL \
                     ORDER BY verified_at DESC LIMIT 1",
                )
                .bind(profile),
            )
            .await?;
        let last = query(concat!(
            "SELECT ",
            change_columns!(),
            " FROM model_changes WHERE profile = ? ORDER BY id DESC LIMIT 1"
        ));
        let change = self.store.json_first(last.bind(profile)).await?;
        Ok(ModelStatus {
            profile: profile.to_string(),
            current,
            verified,
            change,
        })
    }

    /// [`Models::status`] of every profile ever checked, by name.
    pub async fn statuses(self) -> Result<Vec<ModelStatus>> {
        let profiles: Vec<(String,)> = self
            .store
            .all(query_as(
                "SELECT DISTINCT profile FROM model_identities ORDER BY profile",
            ))
            .await?;
        let mut out = Vec::with_capacity(profiles.len());
        for (p,) in profiles {
            out.push(self.status(&p).await?);
        }
        Ok(out)
    }

    /// Record a change unless the same one (profile, from, to) was recorded before: the
    /// change as recorded, or `None` when it is not new.
    pub async fn record_change(self, new: &NewModelChange) -> Result<Option<ModelChange>> {
        let insert = query(concat!(
            "INSERT INTO model_changes \
             (profile, old_identity, new_identity, old_verified, action, seen_at, flap_of) \
             VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (profile, old_identity, new_identity) \
             DO NOTHING RETURNING ",
            change_columns!()
        ))
        .bind(&new.profile)
        .bind(&new.old_identity)
        .bind(&new.new_identity)
        .bind(new.old_verified)
        .bind(new.action)
        .bind(now())
        .bind(new.flap_of);
        // Run to its end (see `write.rs`): the row back only once it is committed.
        self.store.json_first(insert).await
    }

    /// The latest change of `profile` that was told (not part of another's flap), if any.
    pub async fn last_told_change(self, profile: &str) -> Result<Option<ModelChange>> {
        let told = query(concat!(
            "SELECT ",
            change_columns!(),
            " FROM model_changes WHERE profile = ? AND flap_of IS NULL ORDER BY id DESC LIMIT 1"
        ));
        self.store.json_first(told.bind(profile)).await
    }

    /// The changes recorded as part of change `id`'s flap, oldest first.
    pub async fn flap_changes(self, id: i64) -> Result<Vec<ModelChange>> {
        let flap = query(concat!(
            "SELECT ",
            change_columns!(),
            " FROM model_changes WHERE flap_of = ? ORDER BY id"
        ));
        self.store.json_rows(flap.bind(id)).await
    }

    /// The jobs paused for a change, and the eval run started for it.
    pub async fn set_change_outcome(
        self,
        id: i64,
        paused_jobs: &[String],
        eval_run_id: Option<i64>,
    ) -> Result<()> {
        let set = query(
            "UPDATE model_changes SET paused_jobs = ?, eval_run_id = COALESCE(?, eval_run_id) WHERE id = ?",
        )
        .bind(json_list(paused_jobs))
        .bind(eval_run_id)
        .bind(id);
        self.store.run(set).await
    }

    /// A passing eval run saw `profile` serving `identity`: it is verified from now on.
    pub async fn verify_identity(
        self,
        profile: &str,
        identity: &str,
        source: &str,
        run_id: i64,
    ) -> Result<()> {
        self.note_identity(profile, identity, source).await?;
        let set = query(
            "UPDATE model_identities SET verified_at = ?, verified_run = ? \
             WHERE profile = ? AND identity = ?",
        )
        .bind(now())
        .bind(run_id)
        .bind(profile)
        .bind(identity);
        self.store.run(set).await
    }
}

impl Jobs<'_> {
    /// The running jobs that use `profile` (by name, or with `unnamed` those that name none
    /// and so use the default profile).
    pub async fn on_profile(self, profile: &str, unnamed: bool) -> Result<Vec<Job>> {
        let sql = select!(
            jobs,
            "WHERE enabled = TRUE AND (profile = ?1 OR (?2 AND (profile IS NULL OR profile = ''))) \
             ORDER BY created_at, id"
        );
        let q = query(sql).bind(profile).bind(unnamed);
        self.store.json_rows(q).await
    }

    /// The jobs paused for `reason` that use `profile` (as [`Jobs::on_profile`]).
    pub async fn paused_for(
        self,
        reason: PauseReason,
        profile: &str,
        unnamed: bool,
    ) -> Result<Vec<Job>> {
        let sql = select!(
            jobs,
            "WHERE enabled = FALSE AND pause_reason = ?3 \
             AND (profile = ?1 OR (?2 AND (profile IS NULL OR profile = ''))) ORDER BY created_at, id"
        );
        let q = query(sql).bind(profile).bind(unnamed).bind(reason);
        self.store.json_rows(q).await
    }

    /// The model the job's tasks last called, and whether its identity is verified.
    pub async fn last_model(self, job_id: &str) -> Result<Option<LastModel>> {
        let sql = "SELECT s.task_id AS task_id, s.name AS profile, s.model AS model, \
                   s.identity AS identity, s.created_at AS at, \
                   (i.verified_at IS NOT NULL) AS verified \
                   FROM tasks t JOIN task_steps s ON s.task_id = t.id \
                   LEFT JOIN model_identities i ON i.profile = s.name AND i.identity = s.identity \
                   WHERE t.job_id = ? AND s.kind = 'model' AND s.model IS NOT NULL \
                   ORDER BY s.created_at DESC, s.seq DESC LIMIT 1";
        self.store.first(query_as(sql).bind(job_id)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    on_both_engines!(
        Memory,
        tokio::test,
        async fn a_change_is_recorded_once_and_a_verified_identity_ends_the_badge(store: Store) {
            store
                .models()
                .note_identity("fast", "m · greedy #a", "greedy")
                .await
                .expect("note");
            store
                .models()
                .verify_identity("fast", "m · greedy #a", "greedy", 1)
                .await
                .expect("verify");
            store
                .models()
                .note_identity("fast", "m · greedy #b", "greedy")
                .await
                .expect("note");
            let change = NewModelChange {
                profile: "fast".into(),
                old_identity: "m · greedy #a".into(),
                new_identity: "m · greedy #b".into(),
                old_verified: true,
                action: ModelAction::Hold,
                flap_of: None,
            };
            let first = store.models().record_change(&change).await.expect("record");
            let recorded = first.expect("a new change is returned");
            assert_eq!(recorded.action, ModelAction::Hold);
            assert!(
                store
                    .models()
                    .record_change(&change)
                    .await
                    .expect("again")
                    .is_none(),
                "once"
            );
            store
                .models()
                .set_change_outcome(recorded.id, &["j_1".into()], Some(7))
                .await
                .expect("outcome");
            let status = store.models().status("fast").await.expect("status");
            assert_eq!(
                status.current.as_ref().map(|c| c.identity.as_str()),
                Some("m · greedy #b")
            );
            assert_eq!(
                status.verified.as_ref().map(|c| c.identity.as_str()),
                Some("m · greedy #a")
            );
            let badge = status
                .unverified_change()
                .expect("a badge while unverified");
            assert_eq!(
                (badge.paused_jobs.clone(), badge.eval_run_id),
                (vec!["j_1".to_string()], Some(7))
            );
            store
                .models()
                .verify_identity("fast", "m · greedy #b", "greedy", 2)
                .await
                .expect("verify");
            let status = store.models().status("fast").await.expect("status");
            assert!(status.unverified_change().is_none(), "verified: no badge");
            assert_eq!(store.models().statuses().await.expect("all").len(), 1);
        }
    );
}
