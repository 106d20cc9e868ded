//! Built-in tools: web (filled in by its owner).
