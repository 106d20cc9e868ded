//! Tools that come and go with their source (an MCP server): made its current tools,
//! replaced when its list changes, withdrawn when it ends — remembering what it had, so a call
//! meanwhile is told the server is away (`tools/away.rs`).
//!
//! Owns: a source's entries in the registry. Must not: run or check a call (`mod.rs` does).

use super::{Entry, Registry, RegistryError};
use crate::tools::Tool;
use crate::tools::away::Withdrawn;
use std::collections::BTreeMap;
use std::sync::Arc;

impl Registry {
    /// Make `tools` the current tools of `source` (an MCP server), replacing what it had. A
    /// tool that cannot be registered (a bad name or schema, a name another tool has) is left
    /// out and reported; the rest are offered from the next step on.
    pub fn set_source_tools(&self, source: &str, tools: Vec<Arc<dyn Tool>>) -> Vec<RegistryError> {
        self.0.away.back(source);
        let mut errors = Vec::new();
        let mut fresh = Vec::with_capacity(tools.len());
        for tool in tools {
            match Entry::compile(tool, Some(source)) {
                Ok(e) => fresh.push(e),
                Err(e) => errors.push(e),
            }
        }
        let mut entries = self.entries_mut();
        self.remove_source(&mut entries, source);
        for e in fresh {
            if entries.contains_key(&e.spec.name) {
                errors.push(RegistryError::Duplicate(e.spec.name.clone()));
                continue;
            }
            entries.insert(e.spec.name.clone(), Arc::new(e));
        }
        errors
    }

    /// Take every tool of `source` out, for `why`: until it offers tools again, a call to one
    /// of them is refused as unavailable, saying why, rather than as unknown.
    pub fn withdraw_source(&self, source: &str, why: Withdrawn) {
        let mut entries = self.entries_mut();
        let names = self.remove_source(&mut entries, source);
        self.0.away.withdrawn(source, why, names);
    }

    /// Take `source`'s tools out of `entries`: their names.
    fn remove_source(
        &self,
        entries: &mut BTreeMap<String, Arc<Entry>>,
        source: &str,
    ) -> Vec<String> {
        let names = entries
            .iter()
            .filter(|(_, e)| e.source.as_deref() == Some(source))
            .map(|(name, _)| name.clone())
            .collect();
        entries.retain(|_, e| e.source.as_deref() != Some(source));
        // Sets that held the old tools cannot be offered again.
        self.0
            .offers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        names
    }
}
