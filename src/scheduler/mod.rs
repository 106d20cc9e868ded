//! The scheduler: persisted jobs whose firings become fresh tasks.
//!
//! Must not: keep state only in RAM; every job and firing is in the store.
