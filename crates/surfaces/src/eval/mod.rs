//! Models change under you: regression cases as data, runs of them in throwaway data dirs,
//! the model identities they verify, and the daemon's watch that notices a profile answering
//! with a model no run verified.
//!
//! Owns: the case format (`case`) and the suite (`suite`: the starter cases of `evals/`, then
//! the person's own), the loopback fixtures (`fixture`), judging a task against its case
//! (`check`), a run and what it verifies (`runner`), and the reaction to a model change
//! (`watch`, per `model.on_change`).
//! Must not: print, or touch the person's data beyond recording runs, identities and changes,
//! and pausing or resuming the jobs a model change holds; cases run on an [`App`] of their own
//! on a temporary directory. It depends on the parts below it (it builds an `App`); nothing
//! below depends on it.
//!
//! [`App`]: crate::app::App

mod case;
mod check;
mod fixture;
mod runner;
mod suite;
mod watch;

pub use case::{CaseError, EvalCase, Expect, Fixtures, Page, ToolExpect};
pub use check::judge;
pub use runner::{EvalError, EvalReport, EvalRequest, HELPER_AGENT, check_profiles, run};
pub use suite::{choose, load};
pub use watch::ModelWatch;
