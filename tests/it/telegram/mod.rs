//! Telegram without Telegram: an in-process stand-in for the Bot API on 127.0.0.1:0
//! (`standin.rs`, its HTML check in `html.rs`, its own tests in `standin_tests.rs`) that the real
//! `hermes-agent serve` process polls and sends to (`daemon.rs`), as it would api.telegram.org.
//!
//! Every wait is bounded and on a condition, never a fixed sleep.

mod daemon;
mod html;
pub mod standin;
mod standin_tests;
