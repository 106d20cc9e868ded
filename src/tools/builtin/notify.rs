//! Built-in tools: notify (filled in by its owner).
