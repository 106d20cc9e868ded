//! Built-in tools: schedule (filled in by its owner).
