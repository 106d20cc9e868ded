//! Reading the files a person writes — the settings, tool manifests, regression cases — with
//! errors that name the file.
//!
//! Owns: reading one such file to text, and listing the YAML files of a directory.
//! Must not: parse or validate what it reads (each reader above does), or read anything a
//! person did not name.

use std::path::{Path, PathBuf};

/// A file or directory a person keeps that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{}: cannot read the {what}: {source}", path.display())]
pub struct ReadError {
    pub path: PathBuf,
    /// What it is, for the message: `config file`, `manifest`, `evals directory`, …
    pub what: &'static str,
    pub source: std::io::Error,
}

/// The text of `path`, a `what` (as [`ReadError::what`]).
pub fn read_text(path: &Path, what: &'static str) -> Result<String, ReadError> {
    std::fs::read_to_string(path).map_err(|source| ReadError {
        path: path.to_path_buf(),
        what,
        source,
    })
}

/// The `*.yaml` and `*.yml` files of `dir` (a `what`), in name order; a missing directory
/// holds none.
pub fn yaml_files(dir: &Path, what: &'static str) -> Result<Vec<PathBuf>, ReadError> {
    let failed = |source| ReadError {
        path: dir.to_path_buf(),
        what,
        source,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(failed(e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(failed)?.path();
        let is_yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        if is_yaml && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}
