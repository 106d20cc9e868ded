//! The node's id: a random UUID made on a data dir's first start and kept in
//! `DATA_DIR/node-id`, so a node keeps its name across restarts and upgrades, and two
//! daemons on two data dirs (one machine or several) never share one. Not the host name:
//! two daemons on one machine are two nodes, and a machine renamed is still the same node.

use std::path::Path;

/// The file in the data dir that holds the node's id.
pub const NODE_ID_FILE: &str = "node-id";

/// The id kept in `data_dir`, made and written there on first use. A data dir that cannot be
/// read or written (read-only, a full disk) gets an id for this process only, with a warning:
/// metrics are no reason to refuse to start.
pub fn node_id(data_dir: &Path) -> String {
    let path = data_dir.join(NODE_ID_FILE);
    let damaged = match std::fs::read_to_string(&path) {
        Ok(text) if valid(text.trim()) => return text.trim().to_string(),
        Ok(_) => {
            tracing::warn!(file = %path.display(), "the node id file does not hold a UUID; writing a new one");
            true
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot read the node id; using one for this process only");
            return uuid::Uuid::new_v4().to_string();
        }
    };
    let id = uuid::Uuid::new_v4().to_string();
    // Written whole under a name of its own, then put in place: a crash never leaves half an
    // id, and of two processes on a fresh data dir (a CLI `run` beside a starting daemon) the
    // first to link its file wins and the other takes that id.
    let tmp = data_dir.join(format!("{NODE_ID_FILE}.{id}.tmp"));
    let placed = std::fs::create_dir_all(data_dir)
        .and_then(|()| std::fs::write(&tmp, format!("{id}\n")))
        .and_then(|()| match damaged {
            true => std::fs::rename(&tmp, &path),
            false => std::fs::hard_link(&tmp, &path),
        });
    let _ = std::fs::remove_file(&tmp);
    match placed {
        Ok(()) => id,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            match std::fs::read_to_string(&path) {
                Ok(text) if valid(text.trim()) => text.trim().to_string(),
                _ => id,
            }
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot keep the node id in the data dir; using one for this process only");
            id
        }
    }
}

fn valid(id: &str) -> bool {
    uuid::Uuid::parse_str(id).is_ok()
}
