//! The Matrix channel in a build without the cargo feature `matrix`: no SDK, no session, and
//! a handle that can never hold a connected channel.

use super::{Probe, Status};
use hermes_config::MatrixSettings;
use std::path::Path;

/// The connected channel's state; none can exist in this build.
pub(crate) type Inner = crate::channels::Absent<Status>;

/// Why there is nothing to probe.
pub async fn probe(_s: &MatrixSettings, _data_dir: &Path) -> Result<Probe, String> {
    Err(hermes_config::MATRIX_NOT_BUILT.to_string())
}
