//! Built-in tools: working (filled in by its owner).
