//! Built-in tools: memory (filled in by its owner).
