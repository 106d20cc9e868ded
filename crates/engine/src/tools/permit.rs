//! [`Permit`]: leave to run a call that needs approval. A leaf of its own so that the registry
//! (which takes one) and the gate (which checks calls against the registry) need not import
//! each other.

/// Leave to run a call that needs approval: made only by the agent's approval gate, after a
/// person approved that exact call (or a job's `pre_approved` covers the tool).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Permit(());

impl Permit {
    pub(crate) fn granted() -> Permit {
        Permit(())
    }
}
