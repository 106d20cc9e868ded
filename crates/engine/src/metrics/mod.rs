//! Metrics for Prometheus: one registry of metric families and the handle the parts count
//! through. The agent, the registry, the scheduler and the notifier each get a clone of
//! [`Metrics`] at construction (`app.rs`) and call its `observe_…` methods where a thing
//! happens; what is read from the database at scrape time (tasks by state, the outbox's
//! backlog) or from another part's state (open circuits) is handed to [`Metrics::render`] by
//! the `/metrics` handler as a [`Reading`].
//!
//! Owns: the metric names, their help texts, labels and buckets, the node's id
//! (`node.rs`), and the Prometheus text encoding.
//! Must not: import any other part (the parts call in, never the other way round), take a
//! label value that is not bounded (a tool name the registry does not know is `unknown`),
//! or block: every observation is an atomic update (a family's label lookup takes a
//! read lock, a write lock only the first time a label set is seen).

mod node;
#[cfg(test)]
mod tests;

pub use node::{NODE_ID_FILE, node_id};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Metric, Registry};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The `Content-Type` of what [`Metrics::render`] returns: the Prometheus text format 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The label a tool call gets for a name the registry does not have (a name the model made
/// up): one series for all of them, however many names a model invents.
pub const UNKNOWN_TOOL: &str = "unknown";

/// Task durations: from a second's fraction to the default wall-clock limit and beyond.
const TASK_BUCKETS: [f64; 12] = [
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];
/// Model calls: a local small model in tens of milliseconds, a large remote one in a minute.
const MODEL_BUCKETS: [f64; 11] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0];
/// Lateness of a job firing: the timer wakes within milliseconds; a catch-up after a night
/// asleep is hours late.
const LATENESS_BUCKETS: [f64; 13] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    state: &'static str,
    origin: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    profile: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProfileLabel {
    profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryLabels {
    channel: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabel {
    channel: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node_id: String,
    version: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// A gauge without labels that a scrape can leave out: its one series exists only while set.
type Optional = Family<[(&'static str, &'static str); 0], Gauge>;

/// How a model call ended, as its label says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelOutcome {
    Ok,
    Error,
}

impl ModelOutcome {
    fn as_str(self) -> &'static str {
        match self {
            ModelOutcome::Ok => "ok",
            ModelOutcome::Error => "error",
        }
    }
}

/// Why a notice was not delivered, as its label says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryFailure {
    /// A transient failure; the notice is retried later.
    Retry,
    /// Refused for good (a 4xx, a rejected address): not retried.
    Permanent,
    /// Transient failures until the retries ran out.
    GaveUp,
    /// Queued for a channel that is no longer configured.
    ChannelRemoved,
}

impl DeliveryFailure {
    fn as_str(self) -> &'static str {
        match self {
            DeliveryFailure::Retry => "retry",
            DeliveryFailure::Permanent => "permanent",
            DeliveryFailure::GaveUp => "gave_up",
            DeliveryFailure::ChannelRemoved => "channel_removed",
        }
    }
}

/// What is read at scrape time, from the database and the parts' state.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// Tasks per (state, origin), in their stored words. `None`: the database could not be
    /// read, and the series are left out of this scrape rather than shown as zero.
    pub tasks: Option<Vec<(&'static str, &'static str, i64)>>,
    /// Notices waiting in the outbox (`None` as above).
    pub outbox_pending: Option<i64>,
    /// Circuits (a tool, or a tool on one host) open right now.
    pub open_circuits: usize,
}

/// The metrics of one process: a cheap-to-clone handle over the registry and its families.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    /// Every family below, registered once; encoded by `render`.
    registry: Registry,
    work: WorkFamilies,
    tools: ToolFamilies,
    jobs: JobFamilies,
    outbox: OutboxFamilies,
    inbox_messages: Family<ChannelLabel, Counter>,
    /// Two scrapes at once would interleave one's reset of the scrape-time gauges with the
    /// other's encoding; scrapes are rare, so they take turns.
    scrape: Mutex<()>,
}

/// The agent's work: its tasks and their model calls.
struct WorkFamilies {
    /// Tasks per state and origin, set from the database at each scrape.
    tasks: Family<TaskLabels, Gauge>,
    task_duration: Histograms<TaskLabels>,
    model_duration: Histograms<ModelLabels>,
    tokens_in: Family<ProfileLabel, Counter>,
    tokens_out: Family<ProfileLabel, Counter>,
}

/// The tool registry's calls and its circuit breakers.
struct ToolFamilies {
    calls: Family<ToolLabels, Counter>,
    open_circuits: Gauge,
}

/// The scheduler's firings of jobs.
struct JobFamilies {
    firings: Family<OutcomeLabel, Counter>,
    lateness: Histogram,
}

/// The notifier's outbox.
struct OutboxFamilies {
    pending: Optional,
    failures: Family<DeliveryLabels, Counter>,
    sent: Family<ChannelLabel, Counter>,
}

/// Registers `metric` and returns it: a clone shares its values, so the one kept counts into
/// the one the registry encodes.
fn register<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Default for Metrics {
    /// A registry no one scrapes (a part built without the app's, as in a unit test); the
    /// node id is empty.
    fn default() -> Metrics {
        Metrics::new("")
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

// Each group registers its families in its fields' order, which is the order a scrape lists
// them in.
impl WorkFamilies {
    fn register(registry: &mut Registry) -> WorkFamilies {
        WorkFamilies {
            tasks: register(
                registry,
                "tasks",
                "Tasks in the database by state and origin, read at scrape time",
                Family::default(),
            ),
            task_duration: register(
                registry,
                "task_duration_seconds",
                "Run time of the tasks this node ran, from start to end, by final state and origin",
                Family::new_with_constructor(|| Histogram::new(TASK_BUCKETS)),
            ),
            model_duration: register(
                registry,
                "model_call_duration_seconds",
                "Duration of the agent's model calls (retries included) by profile and outcome",
                Family::new_with_constructor(|| Histogram::new(MODEL_BUCKETS)),
            ),
            tokens_in: register(
                registry,
                "tokens_in",
                "Prompt tokens sent to the model, as the server counted them, by profile",
                Family::default(),
            ),
            tokens_out: register(
                registry,
                "tokens_out",
                "Completion tokens the model wrote, as the server counted them, by profile",
                Family::default(),
            ),
        }
    }
}

impl ToolFamilies {
    fn register(registry: &mut Registry) -> ToolFamilies {
        ToolFamilies {
            calls: register(
                registry,
                "tool_calls",
                "Tool calls by tool (a name no tool has: unknown) and outcome (ok, or the error's kind)",
                Family::default(),
            ),
            open_circuits: register(
                registry,
                "circuit_breakers_open",
                "Circuits (a tool, or a tool on one host) open after repeated failures",
                Gauge::default(),
            ),
        }
    }
}

impl JobFamilies {
    fn register(registry: &mut Registry) -> JobFamilies {
        JobFamilies {
            firings: register(
                registry,
                "job_firings",
                "Job firings by outcome (fired, skipped, failed, missed)",
                Family::default(),
            ),
            lateness: register(
                registry,
                "job_firing_lateness_seconds",
                "How long after its scheduled time a job's task was created (fired at minus due)",
                Histogram::new(LATENESS_BUCKETS),
            ),
        }
    }
}

impl OutboxFamilies {
    fn register(registry: &mut Registry) -> OutboxFamilies {
        OutboxFamilies {
            pending: register(
                registry,
                "outbox_pending",
                "Notices waiting in the outbox to be sent, read at scrape time",
                Optional::default(),
            ),
            failures: register(
                registry,
                "outbox_delivery_failures",
                "Failed delivery attempts by channel and kind (retry, permanent, gave_up, channel_removed)",
                Family::default(),
            ),
            sent: register(
                registry,
                "outbox_sent",
                "Notices delivered, by channel",
                Family::default(),
            ),
        }
    }
}

impl Metrics {
    /// The families of one node, registered under the `hermes_` prefix; `node_id` names the
    /// node (see [`node_id`]).
    pub fn new(node_id: &str) -> Metrics {
        let mut registry = Registry::with_prefix("hermes");
        registry.register(
            "node",
            "This node: its id (kept in the data dir) and the program's version",
            Info::new(NodeLabels {
                node_id: node_id.to_string(),
                version: env!("CARGO_PKG_VERSION"),
            }),
        );
        // A scrape lists the families in the order they were registered: the statements
        // below keep it.
        let work = WorkFamilies::register(&mut registry);
        let tools = ToolFamilies::register(&mut registry);
        let jobs = JobFamilies::register(&mut registry);
        let outbox = OutboxFamilies::register(&mut registry);
        let inbox_messages = register(
            &mut registry,
            "inbox_messages",
            "Messages read and recorded, by channel (email, matrix, telegram)",
            Family::default(),
        );
        Metrics {
            inner: Arc::new(Inner {
                registry,
                work,
                tools,
                jobs,
                outbox,
                inbox_messages,
                scrape: Mutex::new(()),
            }),
        }
    }

    /// A task this node ran ended in `state` (its stored word) after `took`.
    pub(crate) fn observe_task(&self, state: &'static str, origin: &'static str, took: Duration) {
        self.inner
            .work
            .task_duration
            .get_or_create(&TaskLabels { state, origin })
            .observe(took.as_secs_f64());
    }

    /// One model call of a task: how long it took, how it ended, the tokens the server counted.
    pub(crate) fn observe_model_call(
        &self,
        profile: &str,
        outcome: ModelOutcome,
        took: Duration,
        tokens_in: u64,
        tokens_out: u64,
    ) {
        let i = &self.inner;
        i.work
            .model_duration
            .get_or_create(&ModelLabels {
                profile: profile.to_string(),
                outcome: outcome.as_str(),
            })
            .observe(took.as_secs_f64());
        if outcome == ModelOutcome::Ok {
            let p = ProfileLabel {
                profile: profile.to_string(),
            };
            i.work.tokens_in.get_or_create(&p).inc_by(tokens_in);
            i.work.tokens_out.get_or_create(&p).inc_by(tokens_out);
        }
    }

    /// One tool call. `tool` is a registered tool's name, or `None` for a name no tool has.
    pub(crate) fn observe_tool_call(&self, tool: Option<&str>, outcome: &'static str) {
        self.inner
            .tools
            .calls
            .get_or_create(&ToolLabels {
                tool: tool.unwrap_or(UNKNOWN_TOOL).to_string(),
                outcome,
            })
            .inc();
    }

    /// `count` firings of a job ended with `outcome` (a run's stored word); a firing that
    /// created its task at a scheduled time says how late that was.
    pub(crate) fn observe_job_firing(
        &self,
        outcome: &'static str,
        count: u64,
        late: Option<Duration>,
    ) {
        self.inner
            .jobs
            .firings
            .get_or_create(&OutcomeLabel { outcome })
            .inc_by(count);
        if let Some(late) = late {
            self.inner.jobs.lateness.observe(late.as_secs_f64());
        }
    }

    /// A notice was delivered on `channel`.
    pub(crate) fn observe_delivery_sent(&self, channel: &str) {
        self.inner
            .outbox
            .sent
            .get_or_create(&ChannelLabel {
                channel: channel.to_string(),
            })
            .inc();
    }

    /// A message read on `channel` (`email`, `matrix`) was recorded.
    pub(crate) fn observe_message_in(&self, channel: &str) {
        self.inner
            .inbox_messages
            .get_or_create(&ChannelLabel {
                channel: channel.to_string(),
            })
            .inc();
    }

    /// An attempt to deliver a notice on `channel` (a configured channel's name) failed.
    pub(crate) fn observe_delivery_failure(&self, channel: &str, kind: DeliveryFailure) {
        self.inner
            .outbox
            .failures
            .get_or_create(&DeliveryLabels {
                channel: channel.to_string(),
                kind: kind.as_str(),
            })
            .inc();
    }

    /// Every family in the Prometheus text format, the scrape-time gauges set from `reading`.
    pub fn render(&self, reading: &Reading) -> String {
        let i = &self.inner;
        let _turn = hermes_store::util::lock(&i.scrape);
        // A state with no tasks left must not keep its last count.
        i.work.tasks.clear();
        for &(state, origin, n) in reading.tasks.iter().flatten() {
            i.work
                .tasks
                .get_or_create(&TaskLabels { state, origin })
                .set(n);
        }
        i.outbox.pending.clear();
        if let Some(n) = reading.outbox_pending {
            i.outbox.pending.get_or_create(&[]).set(n);
        }
        i.tools
            .open_circuits
            .set(i64::try_from(reading.open_circuits).unwrap_or(i64::MAX));
        let mut out = String::new();
        // Writing into a String cannot fail, and the registry's own encoders return no error
        // of their own.
        if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &i.registry)
        {
            tracing::error!(error = %e, "could not encode the metrics");
        }
        out
    }
}
