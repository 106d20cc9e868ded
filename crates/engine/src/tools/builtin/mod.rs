//! The built-in tools. Each file holds the tools of one service and takes that service's
//! handle at construction.

pub mod memory;
pub mod notify;
pub mod schedule;
pub mod web;
pub mod working;
