//! The closed sets of words stored in text columns and shown by the API: a task's state
//! ([`TaskState`]), who made a task or a job ([`Origin`]), why a task did not succeed
//! ([`FailReason`]), what a job firing did ([`RunOutcome`]), where a notice is
//! ([`NoticeState`]), what became of a job run's delivery ([`Delivery`]) and of a mail read
//! from the inbox ([`InboxState`], [`IgnoreReason`], [`InboxCommand`], [`CommandState`]), why a
//! job is paused ([`PauseReason`]), and the words of model changes and eval runs
//! ([`ModelAction`], [`EvalTrigger`], [`EvalVerdict`]). Each is an enum in
//! the code and the same word as before in the database and in JSON, written once: the unit
//! enums through [`word_enum!`], `Delivery` (which carries a reason) by hand, both stored and
//! serialised through [`as_text!`].

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::{Postgres, Sqlite};

/// An enum of unit variants, each with the word it is stored and serialised as.
macro_rules! word_enum {
    ($(#[$meta:meta])* $name:ident, $what:literal { $($(#[$vmeta:meta])* $variant:ident = $word:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = UnknownWord;
            fn from_str(s: &str) -> Result<Self, UnknownWord> {
                match s {
                    $($word => Ok($name::$variant),)+
                    other => Err(UnknownWord {
                        what: $what,
                        word: other.to_string(),
                        known: $name::ALL.iter().map(|v| v.as_str()).collect(),
                    }),
                }
            }
        }

        as_text!($name);
    };
}

/// A word that is none of its set's: names the set and lists the words it has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} '{word}'; use one of: {}", known.join(", "))]
pub struct UnknownWord {
    pub what: &'static str,
    pub word: String,
    pub known: Vec<&'static str>,
}

/// Serialise and store a type as its text form (`Display`), and read it back with `FromStr`,
/// on both engines (a TEXT column on each).
macro_rules! as_text {
    // First: a `ty` fragment cannot back out, so `@on …` must not reach the rule below.
    (@on $db:ident, $name:ty) => {
        impl sqlx::Type<$db> for $name {
            fn type_info() -> <$db as sqlx::Database>::TypeInfo {
                <String as sqlx::Type<$db>>::type_info()
            }
            fn compatible(ty: &<$db as sqlx::Database>::TypeInfo) -> bool {
                <String as sqlx::Type<$db>>::compatible(ty)
            }
        }

        impl<'q> sqlx::Encode<'q, $db> for $name {
            fn encode_by_ref(
                &self,
                buf: &mut <$db as sqlx::Database>::ArgumentBuffer,
            ) -> Result<IsNull, BoxDynError> {
                <String as sqlx::Encode<'q, $db>>::encode(self.to_string(), buf)
            }
        }

        impl<'r> sqlx::Decode<'r, $db> for $name {
            fn decode(value: <$db as sqlx::Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
                let text = <&str as sqlx::Decode<'r, $db>>::decode(value)?;
                text.parse::<$name>().map_err(Into::into)
            }
        }
    };
    ($name:ty) => {
        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }

        as_text!(@on Sqlite, $name);
        as_text!(@on Postgres, $name);

        impl crate::sql::Bind for $name {
            fn arg(&self) -> crate::sql::Arg {
                crate::sql::Arg::Text(Some(self.to_string()))
            }
            fn null() -> crate::sql::Arg {
                crate::sql::Arg::Text(None)
            }
        }
    };
}

word_enum! {
    /// Where a task is in its life: `pending → running → succeeded | failed | cancelled`.
    TaskState, "state" {
        Pending = "pending",
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
        Cancelled = "cancelled",
    }
}

impl TaskState {
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded | TaskState::Failed | TaskState::Cancelled
        )
    }
}

word_enum! {
    /// What a row of a task's trace records.
    StepKind, "step kind" {
        Model = "model",
        Tool = "tool",
        Note = "note",
        /// A call held for a person: `waiting`, then the decision.
        Approval = "approval",
    }
}

word_enum! {
    /// Where an approval request is: `open` until a person answers (`approved`, `denied`) or
    /// its time passes (`expired`, a denial with reason `expired`).
    ApprovalState, "approval state" {
        Open = "open",
        Approved = "approved",
        Denied = "denied",
        Expired = "expired",
    }
}

word_enum! {
    /// What a job's due time became (the `outcome` of a run).
    RunOutcome, "outcome" {
        /// A task was started for it.
        Fired = "fired",
        /// Not run: the previous run was still going, or the precheck saw no change.
        Skipped = "skipped",
        /// Not run: the daemon was down past the catch-up grace; or cut off by a stop (its
        /// task's end named), its due time run again as a catch-up when within the grace.
        Missed = "missed",
        /// The run or its start failed.
        Failed = "failed",
    }
}

word_enum! {
    /// Where a notice in the outbox is.
    NoticeState, "delivery state" {
        Pending = "pending",
        Sent = "sent",
        Failed = "failed",
    }
}

word_enum! {
    /// Who asked for a task or a job. A task started by a job (directly or through a
    /// sub-agent) may not create jobs unless `scheduler.allow_nested` is on.
    Origin, "origin" {
        /// The command line (`run`, `jobs add`).
        Cli = "cli",
        /// The HTTP API.
        Api = "api",
        /// A job firing.
        Job = "job",
        /// A sub-agent started by `delegate`.
        Agent = "agent",
        /// The model, through a tool (`schedule_task`).
        Model = "model",
        /// The dashboard in a browser.
        Web = "web",
        /// An MCP client, through `hermes-agent mcp`.
        Mcp = "mcp",
        /// A mail read from `inbox.email` (a reply to a notice, or a fresh message).
        Email = "email",
        /// A message in a Matrix room (`channels.matrix`).
        Matrix = "matrix",
        /// A message to the Telegram bot (`channels.telegram`).
        Telegram = "telegram",
    }
}

word_enum! {
    /// The channel a conversation's message came in on (the inbox's `channel` column): the
    /// same seam for every one — who may instruct, replies bound to runs, commands, once.
    #[derive(Default)]
    Channel, "channel" {
        /// `inbox.email`: IMAP in, SMTP out.
        #[default]
        Email = "email",
        /// `channels.matrix`: a Matrix account, end-to-end encrypted.
        Matrix = "matrix",
        /// `channels.telegram`: a Telegram bot, long polling the Bot API.
        Telegram = "telegram",
    }
}

impl Channel {
    /// The origin of the tasks this channel's messages start.
    pub fn origin(self) -> Origin {
        match self {
            Channel::Email => Origin::Email,
            Channel::Matrix => Origin::Matrix,
            Channel::Telegram => Origin::Telegram,
        }
    }
}

/// A person at the command line: the origin of a request that names none (tests, tools
/// built by hand).
impl Default for Origin {
    fn default() -> Origin {
        Origin::Cli
    }
}

word_enum! {
    /// Why a task ended without an answer (the `reason` column and field).
    FailReason, "reason" {
        /// `agent.max_steps` model calls without a final answer.
        MaxSteps = "max_steps",
        /// The task's wall-clock limit.
        Timeout = "timeout",
        /// The process died while the task was running.
        Interrupted = "interrupted",
        /// The daemon stopped before the task finished.
        Shutdown = "shutdown",
        /// The model call failed (connection, status, a reply that cannot be read).
        Model = "model",
        /// Cancelled by the user.
        Cancelled = "cancelled",
        /// The model answered with neither text nor a tool call.
        EmptyAnswer = "empty_answer",
        /// The task's progress could not be recorded.
        Store = "store",
        /// The loop guard stopped a model repeating the same call.
        Loop = "loop",
    }
}

word_enum! {
    /// What a mail read from the inbox became.
    InboxState, "inbox state" {
        /// It became a task or a command.
        Acted = "acted",
        /// Recorded and left alone; the reason says why.
        Ignored = "ignored",
    }
}

word_enum! {
    /// Why a mail read from the inbox was not acted on. None of these is ever answered, except
    /// `no_job` (an allowed, authenticated sender asked for a job that is not there).
    IgnoreReason, "ignore reason" {
        /// The sender is not in `inbox.email.allow_from`.
        NotAllowed = "not_allowed",
        /// The sender started `inbox.email.max_tasks_per_hour` tasks within the last hour.
        RateLimited = "rate_limited",
        /// An automatic answer: `Auto-Submitted`, a vacation notice, a bounce.
        AutoReply = "auto_reply",
        /// Bulk or list mail: `Precedence: bulk|junk|list`, `List-Id`, `List-Unsubscribe`.
        Bulk = "bulk",
        /// Sent from the agent's own address.
        OwnAddress = "own_address",
        /// `inbox.email.trusted_authserv_id` is set and the receiving server did not vouch for
        /// the sender (no dkim=pass or dmarc=pass for the From domain).
        NotAuthenticated = "not_authenticated",
        /// A command for a notice that has no job (or whose job was removed).
        NoJob = "no_job",
        /// `approve` / `deny` in reply to a notice that asked about no approval.
        NoApproval = "no_approval",
        /// Nothing written once quotes and the signature were taken off.
        Empty = "empty",
        /// Not a mail that can be read (no From address, not MIME).
        Unreadable = "unreadable",
        /// An encrypted chat message the agent holds no key for (the reason is in `detail`).
        Undecryptable = "undecryptable",
        /// A chat message in a room of several people that neither mentions the agent nor
        /// answers one of its messages.
        NotAddressed = "not_addressed",
        /// A chat message sent unencrypted in an encrypted room: the homeserver, or anyone
        /// who holds it, could have written it in a person's name.
        Unencrypted = "unencrypted",
    }
}

word_enum! {
    /// A command given by replying to a job's notice, carried out without the model.
    InboxCommand, "inbox command" {
        Pause = "pause",
        Resume = "resume",
        /// Fire the job now, as `POST /v1/jobs/{id}/run` does.
        RunNow = "run_now",
        /// Approve the held tool call the notice asked about.
        Approve = "approve",
        /// Deny it (the rest of the reply, if any, is the reason).
        Deny = "deny",
    }
}

word_enum! {
    /// How far a command got. Pause and resume are done in the transaction that records the
    /// mail; a run is asked for in it (`requested`) and started after it (`started`, then
    /// `done` or `failed`), so a restart finds what is left to do and never starts it twice.
    CommandState, "command state" {
        Requested = "requested",
        /// Being carried out: a restart that finds it here cannot know whether the run began.
        Started = "started",
        Done = "done",
        Failed = "failed",
    }
}

word_enum! {
    /// Why a job is paused (the `pause_reason` column and field).
    PauseReason, "pause reason" {
        /// Paused from the API, the CLI or the dashboard.
        Person = "person",
        /// Its profile began to answer with a model no eval has verified
        /// (`model.on_change: hold`); a passing eval or a person resumes it.
        ModelChanged = "model_changed",
    }
}

word_enum! {
    /// What the daemon did about a model change (`model.on_change` when it was seen).
    ModelAction, "model change action" {
        /// Recorded, noticed and shown.
        Warn = "warn",
        /// Also ran the regression cases against the new model.
        Eval = "eval",
        /// Also paused the jobs that use the profile.
        Hold = "hold",
    }
}

word_enum! {
    /// Who started an eval run.
    EvalTrigger, "eval trigger" {
        /// `hermes-agent eval`.
        Cli = "cli",
        /// The daemon, on a model change (`model.on_change: eval` or `hold`).
        ModelChange = "model_change",
    }
}

word_enum! {
    /// How one regression case came out.
    EvalVerdict, "eval verdict" {
        Passed = "passed",
        Failed = "failed",
    }
}

/// What became of a job run's result on its channels (the `delivery` column and field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The job has no channels (or failure notices are off).
    None,
    /// Queued in the outbox on every channel, not all of it settled yet; the outbox shows
    /// each notice's progress.
    Queued,
    /// Every notice of the run went out.
    Sent,
    /// The answer was exactly `[SILENT]`: recorded, not sent.
    Silent,
    /// The run failed again after a failure report; no further notice until it recovers.
    Suppressed,
    /// Queuing failed on at least one channel, or a notice failed for good:
    /// `CHANNEL: ERROR; …`.
    Failed(String),
}

impl Delivery {
    const FAILED_PREFIX: &'static str = "failed: ";

    pub fn is_failed(&self) -> bool {
        matches!(self, Delivery::Failed(_))
    }
}

impl std::fmt::Display for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Delivery::None => f.write_str("none"),
            Delivery::Queued => f.write_str("queued"),
            Delivery::Sent => f.write_str("sent"),
            Delivery::Silent => f.write_str("silent"),
            Delivery::Suppressed => f.write_str("suppressed"),
            Delivery::Failed(why) => write!(f, "{}{why}", Delivery::FAILED_PREFIX),
        }
    }
}

impl std::str::FromStr for Delivery {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        Ok(match s {
            "none" => Delivery::None,
            "queued" => Delivery::Queued,
            "sent" => Delivery::Sent,
            "silent" => Delivery::Silent,
            "suppressed" => Delivery::Suppressed,
            other => match other.strip_prefix(Delivery::FAILED_PREFIX) {
                Some(why) => Delivery::Failed(why.to_string()),
                None => {
                    return Err(UnknownWord {
                        what: "delivery state",
                        word: other.to_string(),
                        known: vec![
                            "none",
                            "queued",
                            "sent",
                            "silent",
                            "suppressed",
                            "failed: REASON",
                        ],
                    });
                }
            },
        })
    }
}

as_text!(Delivery);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_through_json() {
        for o in Origin::ALL {
            let json = serde_json::to_string(o).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", o.as_str()));
            assert_eq!(serde_json::from_str::<Origin>(&json).ok(), Some(*o));
        }
        assert_eq!(FailReason::MaxSteps.as_str(), "max_steps");
        assert_eq!("loop".parse::<FailReason>(), Ok(FailReason::Loop));
        let err = "bogus".parse::<Origin>().unwrap_err().to_string();
        assert!(err.contains("cli, api, job"), "{err}");
        for s in TaskState::ALL {
            assert_eq!(s.as_str().parse::<TaskState>(), Ok(*s));
        }
        assert_eq!(RunOutcome::Missed.to_string(), "missed");
        assert_eq!(NoticeState::Sent.as_str(), "sent");
        assert_eq!(Origin::Email.as_str(), "email");
        assert_eq!("run_now".parse::<InboxCommand>(), Ok(InboxCommand::RunNow));
        assert_eq!(IgnoreReason::NotAllowed.as_str(), "not_allowed");
        let err = "spam".parse::<IgnoreReason>().unwrap_err().to_string();
        assert!(err.contains("not_allowed, rate_limited"), "{err}");
    }

    #[test]
    fn delivery_keeps_the_old_words() {
        let cases = [
            (Delivery::None, "none"),
            (Delivery::Queued, "queued"),
            (Delivery::Sent, "sent"),
            (Delivery::Silent, "silent"),
            (
                Delivery::Failed("email: down".into()),
                "failed: email: down",
            ),
        ];
        for (d, word) in cases {
            assert_eq!(d.to_string(), word);
            assert_eq!(word.parse::<Delivery>(), Ok(d.clone()));
            assert_eq!(serde_json::to_value(&d).ok(), Some(serde_json::json!(word)));
        }
        assert!("pending".parse::<Delivery>().is_err());
    }

    on_both_engines!(
        Memory,
        tokio::test,
        async fn stored_as_text(store: Store) {
            let (o, d): (Origin, Delivery) = crate::query_as("SELECT ?, ?")
                .bind(Origin::Mcp)
                .bind(Delivery::Failed("x".into()))
                .fetch_one(&store)
                .await
                .expect("round trip");
            assert_eq!((o, d), (Origin::Mcp, Delivery::Failed("x".into())));
        }
    );
}
