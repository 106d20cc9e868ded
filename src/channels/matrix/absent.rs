//! The Matrix channel in a build without the cargo feature `matrix`: no SDK, no session, and
//! a handle that can never hold a connected channel.

use crate::config::MatrixSettings;
use std::path::Path;

/// The connected channel's state; none can exist in this build.
pub enum Inner {}

/// What `doctor`'s probe found (never anything in this build).
#[derive(Debug, Clone)]
pub struct Probe {
    pub user: String,
    pub device: String,
    pub encryption: String,
    pub rooms: Vec<(String, Result<String, String>)>,
}

/// Why there is nothing to probe.
pub async fn probe(_s: &MatrixSettings, _data_dir: &Path) -> Result<Probe, String> {
    Err(crate::config::MATRIX_NOT_BUILT.to_string())
}
