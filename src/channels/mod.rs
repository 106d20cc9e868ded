//! Chat channels: the protocols the agent talks to people through, besides mail (Matrix).
//!
//! Owns: each channel's connection, its account's session and keys, turning the protocol's
//! events into [`crate::inbox::ChatMessage`]s and the outbox's notices into the protocol's
//! messages.
//! Must not: decide what a message means or who may instruct the agent (the inbox does, the
//! same for every channel); run tools or call the model; import the entry modules (`http`,
//! `cli`, `daemon`), which depend on it.

pub mod matrix;

pub use matrix::Matrix;
