//! The Matrix channel in a build without the cargo feature `matrix`: no SDK, no session, and
//! a handle that is always off.

use super::Probe;
use hermes_config::MatrixSettings;
use std::path::Path;

/// Why there is nothing to probe.
pub async fn probe(_s: &MatrixSettings, _data_dir: &Path) -> Result<Probe, String> {
    Err(hermes_config::MATRIX_NOT_BUILT.to_string())
}
