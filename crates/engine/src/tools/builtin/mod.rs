//! The built-in tools. Each file holds the tools of one service and takes that service's
//! handle at construction.

pub mod memory;
pub mod notify;
pub mod schedule;
pub mod web;
pub mod working;

/// The names of the tools built into the program, those above and the agent's `delegate` pair:
/// a manifest may not take one (the registry would refuse the second at start, far from the
/// file). `tests/it/tools_registry.rs` holds this list to what an app registers.
pub const BUILTIN_NAMES: [&str; 13] = [
    working::READ_WORKING_MEMORY,
    "web_fetch",
    "watch_page",
    "read_feed",
    "notify",
    "schedule_task",
    "list_schedules",
    "cancel_schedule",
    "remember",
    "recall",
    "forget",
    "delegate",
    "delegate_parallel",
];
