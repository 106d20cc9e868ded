//! The agent's task queue: how the parts built before the agent reach it. The scheduler's job
//! runner and the delegate tools are held by the agent's own tool registry, so they cannot hold
//! the agent; they hold a [`TaskQueue`] instead, made together with its [`Desk`] before the
//! agent, and the agent serves the desk once it exists ([`Agent::serve`]).
//!
//! Owns: the orders those parts may give (one [`Order`] variant each, answered on a oneshot),
//! the loop that takes them, and its lifetime: the loop holds the agent, and the senders sit
//! in the agent's own registry, so the [`Serving`] guard its builder keeps is what stops it;
//! a claimed task already handed over to run keeps the agent until it ends.
//! Must not: decide what an order means beyond calling the agent method it names (the job
//! runner and the delegate tools keep their own rules); hold the agent past its guard for
//! anything but a claimed run; make an order wait for another (a delegate's order comes while
//! a task of this agent is inside its tool call).

use super::{Agent, AgentError, Claimed, RunOptions, Submit};
use crate::llm::ToolCall;
use crate::tools::{ToolContext, ToolError};
use hermes_store::Task;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::{CancellationToken, DropGuard};

/// Where an order's answer goes.
type Reply<T> = oneshot::Sender<T>;

/// What [`TaskQueue::create_many`] answers: nothing stored (the outer error), or per request
/// its task or why it was refused, in the order given.
pub(super) type SubmittedMany = Result<Vec<Result<Task, AgentError>>, AgentError>;

/// Why an order got no answer from the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// Nobody serves the desk: the agent was never served, or its builder let it go.
    #[error("the agent takes no orders (it is not started, or it is shutting down)")]
    Closed,
    /// The order was taken but its answer never came: the agent stopped first, or the work
    /// crashed.
    #[error("the agent dropped the order without an answer (it stopped, or the work crashed)")]
    Unanswered,
}

/// What the job runner and the delegate tools ask of the agent, each with where its answer
/// goes.
pub(super) enum Order {
    /// Store a pending task (a worker of the pool runs it).
    Create {
        req: Submit,
        reply: Reply<Result<Task, AgentError>>,
    },
    /// Store a task claimed by this process, to be run with [`Order::RunClaimed`].
    CreateClaimed {
        req: Submit,
        reply: Reply<Result<Claimed, AgentError>>,
    },
    /// Store pending tasks in one statement and wake the workers.
    CreateMany {
        reqs: Vec<Submit>,
        reply: Reply<SubmittedMany>,
    },
    /// Run a claimed task here to its end (or its wait for a person).
    RunClaimed {
        claimed: Claimed,
        opts: RunOptions,
        reply: Reply<Result<Task, AgentError>>,
    },
    /// Wait until a task is finished, for at most `timeout`.
    Wait {
        id: String,
        timeout: Duration,
        reply: Reply<Result<Task, AgentError>>,
    },
    /// Wake an idle worker: a pending task is there.
    Wake,
    /// End a task that must not run (see [`Agent::abandon`]).
    Abandon {
        id: String,
        why: String,
        reply: Reply<Result<(), AgentError>>,
    },
    /// Would this call run unattended: no model, no person (a job's precheck)?
    CheckPrecheck {
        tool: String,
        arguments: Value,
        reply: Reply<Result<(), ToolError>>,
    },
    /// Run one tool call without the model (a job's precheck).
    Precheck {
        call: ToolCall,
        ctx: ToolContext,
        reply: Reply<Result<Value, ToolError>>,
    },
}

/// The handle the parts built before the agent keep. Cheap to clone.
#[derive(Clone)]
pub struct TaskQueue {
    // Unbounded without harm: every sender but `wake` awaits its answer, so the orders waiting
    // are never more than the callers waiting; and sending never waits on the loop.
    orders: mpsc::UnboundedSender<Order>,
}

/// The receiving end of a [`TaskQueue`], for [`Agent::serve`].
pub struct Desk {
    orders: mpsc::UnboundedReceiver<Order>,
}

/// Keeps the agent serving its desk; dropping the last clone stops the loop, which lets go of
/// the agent (a run already handed over ends first: its task must reach a final state).
#[derive(Clone)]
pub struct Serving {
    _stop: Arc<DropGuard>,
}

impl TaskQueue {
    /// The handle and its desk, made before the agent that will serve the desk.
    pub fn new() -> (TaskQueue, Desk) {
        let (orders, rx) = mpsc::unbounded_channel();
        (TaskQueue { orders }, Desk { orders: rx })
    }

    async fn ask<T>(&self, order: impl FnOnce(Reply<T>) -> Order) -> Result<T, QueueError> {
        let (reply, answer) = oneshot::channel();
        self.orders
            .send(order(reply))
            .map_err(|_| QueueError::Closed)?;
        answer.await.map_err(|_| QueueError::Unanswered)
    }

    pub(super) async fn create(&self, req: Submit) -> Result<Result<Task, AgentError>, QueueError> {
        self.ask(|reply| Order::Create { req, reply }).await
    }

    pub(super) async fn create_claimed(
        &self,
        req: Submit,
    ) -> Result<Result<Claimed, AgentError>, QueueError> {
        self.ask(|reply| Order::CreateClaimed { req, reply }).await
    }

    pub(super) async fn create_many(&self, reqs: Vec<Submit>) -> Result<SubmittedMany, QueueError> {
        self.ask(|reply| Order::CreateMany { reqs, reply }).await
    }

    /// The run goes on to the task's end even if the caller stops waiting for it.
    pub(super) async fn run_claimed(
        &self,
        claimed: Claimed,
        opts: RunOptions,
    ) -> Result<Result<Task, AgentError>, QueueError> {
        self.ask(|reply| Order::RunClaimed {
            claimed,
            opts,
            reply,
        })
        .await
    }

    /// A task's end, however it comes (a worker here, another process, a cancel).
    pub(super) async fn wait(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<Result<Task, AgentError>, QueueError> {
        let id = id.to_string();
        self.ask(|reply| Order::Wait { id, timeout, reply }).await
    }

    pub(super) fn wake(&self) -> Result<(), QueueError> {
        self.orders
            .send(Order::Wake)
            .map_err(|_| QueueError::Closed)
    }

    pub(super) async fn abandon(
        &self,
        id: &str,
        why: &str,
    ) -> Result<Result<(), AgentError>, QueueError> {
        let (id, why) = (id.to_string(), why.to_string());
        self.ask(|reply| Order::Abandon { id, why, reply }).await
    }

    pub(super) async fn check_precheck(
        &self,
        tool: &str,
        arguments: &Value,
    ) -> Result<Result<(), ToolError>, QueueError> {
        let (tool, arguments) = (tool.to_string(), arguments.clone());
        self.ask(|reply| Order::CheckPrecheck {
            tool,
            arguments,
            reply,
        })
        .await
    }

    pub(super) async fn precheck(
        &self,
        call: ToolCall,
        ctx: ToolContext,
    ) -> Result<Result<Value, ToolError>, QueueError> {
        self.ask(|reply| Order::Precheck { call, ctx, reply }).await
    }
}

impl Agent {
    /// Take the orders given through `desk`'s queue until the returned guard is dropped. Keep
    /// the guard as long as the agent: it is what holds the agent for the parts that can only
    /// reach it through the queue.
    pub fn serve(&self, desk: Desk) -> Serving {
        let stop = CancellationToken::new();
        tokio::spawn(self.clone().take_orders(desk, stop.clone()));
        Serving {
            _stop: Arc::new(stop.drop_guard()),
        }
    }

    async fn take_orders(self, mut desk: Desk, stop: CancellationToken) {
        loop {
            let order = tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                order = desk.orders.recv() => order,
            };
            let Some(order) = order else { break };
            // Each order on its own: a run may take minutes, and a delegate's order comes
            // while another order's run is inside its tool call, waiting for this one.
            tokio::spawn(self.clone().take(order, stop.clone()));
        }
        self.settle_left(desk).await;
    }

    /// What was still queued when the loop stopped: a claimed task handed over to run is run
    /// (it is claimed by this process, and nothing else would ever end it); every other order
    /// is dropped, and its caller hears [`QueueError::Unanswered`].
    async fn settle_left(&self, mut desk: Desk) {
        desk.orders.close();
        while let Ok(order) = desk.orders.try_recv() {
            if let Order::RunClaimed {
                claimed,
                opts,
                reply,
            } = order
            {
                let _ = reply.send(self.run_claimed(claimed, opts).await);
            }
        }
    }

    async fn take(self, order: Order, stop: CancellationToken) {
        match order {
            Order::Create { req, reply } => {
                let _ = reply.send(self.create(req).await);
            }
            Order::CreateClaimed { req, reply } => {
                // Its caller gone, the claim is dropped unanswered, and ends its task.
                let _ = reply.send(self.create_claimed(req).await);
            }
            Order::CreateMany { reqs, reply } => {
                let _ = reply.send(self.submit_many(reqs).await);
            }
            Order::RunClaimed {
                claimed,
                opts,
                reply,
            } => {
                // Never cut short: the claimed task must reach a final state (or its wait).
                let _ = reply.send(self.run_claimed(claimed, opts).await);
            }
            Order::Wait { id, timeout, reply } => {
                let rx = self.subscribe();
                answer_while_asked(reply, &stop, self.wait(&id, rx, timeout)).await;
            }
            Order::Wake => self.wake_workers(),
            Order::Abandon { id, why, reply } => {
                let _ = reply.send(self.abandon(&id, &why).await);
            }
            Order::CheckPrecheck {
                tool,
                arguments,
                reply,
            } => {
                let _ = reply.send(self.check_unattended(&tool, &arguments));
            }
            Order::Precheck { call, ctx, reply } => {
                let run = self.registry().call_raw(&call, &ctx);
                answer_while_asked(reply, &stop, run).await;
            }
        }
    }

    /// Whether a call would be accepted with no model and no person to ask: the tool exists,
    /// is allowed, its arguments fit, and it is not gated on an approval.
    fn check_unattended(&self, tool: &str, arguments: &Value) -> Result<(), ToolError> {
        if self.registry().needs_approval(tool) {
            return Err(ToolError::NeedsApproval(tool.to_string()));
        }
        self.registry().check_call(tool, arguments)
    }
}

/// Answer with `work`'s result, unless its caller stops listening or the agent stops serving
/// first: a wait or a precheck nobody needs must not hold the agent.
async fn answer_while_asked<T>(
    mut reply: Reply<T>,
    stop: &CancellationToken,
    work: impl Future<Output = T>,
) {
    let done = tokio::select! {
        _ = reply.closed() => None,
        _ = stop.cancelled() => None,
        done = work => Some(done),
    };
    if let Some(done) = done {
        let _ = reply.send(done);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Gateway;
    use crate::tools::RegistryBuilder;
    use hermes_store::{Origin, Store};

    /// Waits that end on their own, bounded so a broken loop fails the test instead of hanging.
    const BOUND: Duration = Duration::from_secs(10);

    async fn agent() -> Agent {
        let settings = hermes_config::Settings::default();
        let store = Store::open_in_memory().await.expect("store");
        let gateway = Gateway::new(&settings.model).expect("gateway");
        let registry = RegistryBuilder::new(settings.tools.clone(), store.clone()).build();
        Agent::new(settings, store, gateway, registry, None)
    }

    #[tokio::test]
    async fn dropping_the_guard_stops_the_loop_and_lets_the_agent_go() {
        let (queue, desk) = TaskQueue::new();
        let agent = agent().await;
        let serving = agent.serve(desk);
        let task = queue
            .create(Submit::new("say hello", Origin::Cli, None))
            .await
            .expect("answered")
            .expect("created");
        assert!(!task.id.is_empty());

        let weak = Arc::downgrade(&agent.inner);
        drop(agent);
        assert!(weak.upgrade().is_some(), "the loop keeps the agent");
        drop(serving);
        tokio::time::timeout(BOUND, async {
            while weak.upgrade().is_some() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the agent is let go once its guard is dropped");
    }

    #[tokio::test]
    async fn an_order_after_the_loop_is_gone_is_refused() {
        let (queue, desk) = TaskQueue::new();
        let agent = agent().await;
        drop(agent.serve(desk));
        tokio::time::timeout(BOUND, async {
            // An order sent before the loop saw the stop is dropped with the desk, unanswered;
            // once the desk is gone, every order is refused at once.
            while queue.check_precheck("watch_page", &Value::Null).await != Err(QueueError::Closed)
            {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the loop stops");
        assert_eq!(queue.wake(), Err(QueueError::Closed));
    }

    /// A claimed task is never taken by a worker: if its holder lets it go unrun (cancelled
    /// between being answered and running it), only the claim itself can end it.
    #[tokio::test]
    async fn a_claimed_task_let_go_unrun_is_ended() {
        let agent = agent().await;
        let mut finished = agent.subscribe();
        let claimed = agent
            .create_claimed(Submit::new("say hello", Origin::Cli, None))
            .await
            .expect("created");
        let id = claimed.task().id.clone();
        drop(claimed);
        let ended = tokio::time::timeout(BOUND, async {
            loop {
                match finished.recv().await {
                    Ok(f) if f.id == id => return f,
                    Ok(_) => {}
                    Err(e) => panic!("announcements ended: {e}"),
                }
            }
        })
        .await
        .expect("a claimed task let go unrun is ended, not left running");
        assert_eq!(ended.state, hermes_store::TaskState::Cancelled);
        let row = agent.inner.store.tasks().get(&id).await.expect("row");
        assert_eq!(row.state, hermes_store::TaskState::Cancelled);
        assert_eq!(row.error.as_deref(), Some(crate::agent::claim::UNRUN));
    }

    #[tokio::test]
    async fn a_desk_never_served_refuses_orders() {
        let (queue, desk) = TaskQueue::new();
        drop(desk);
        let asked = queue.create(Submit::new("x", Origin::Cli, None)).await;
        assert!(matches!(asked, Err(QueueError::Closed)));
    }
}
