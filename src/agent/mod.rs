//! The agent: the plan-execute-check loop, the task state machine and sub-agents.
//!
//! Owns: turning a task into model calls and tool calls until an answer, within `max_steps`
//! and the task's wall-clock limit; recording every transition and step through the store.
//! Must not: write SQL or HTTP itself; it reaches the model through `llm`, tools through the
//! `tools` registry, and memory through `memory`.
