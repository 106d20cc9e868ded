//! What a person writes about confinement: the mode (`tools.sandbox`) and the widening a
//! manifest or an `mcp.servers.NAME` entry may ask for (`sandbox: {network, read, write,
//! memory_mb, processes}`). Only data and its checks; applying it is `tools::sandbox`, which
//! re-exports these (settings sit below the tools, so the tools import them, never the reverse).

use serde::{Deserialize, Serialize};

/// `tools.sandbox`: what happens to every manifest command and stdio MCP server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Confined: Landlock, seccomp, rlimits (as far as the kernel supports them).
    #[default]
    Enforce,
    /// Not confined; each tool is named in one warning at start.
    Warn,
    /// Not confined; said once at start.
    Off,
}

/// `network:` of a widening: `true` (any port), or `HOST:PORT` entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Network {
    Any(bool),
    To(Vec<String>),
}

impl Default for Network {
    fn default() -> Self {
        Network::To(Vec::new())
    }
}

/// A widening of the box: only ever more than the default, never less.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Widening {
    /// Where it may connect (TCP): Landlock filters by port, so the host is documentation.
    pub network: Network,
    /// Extra paths, read-only (`~/` is the daemon's home).
    pub read: Vec<String>,
    /// Extra paths, read-write.
    pub write: Vec<String>,
    /// Address-space limit; unset: [`DEFAULT_MEMORY_MB`].
    pub memory_mb: Option<u64>,
    /// Process limit; unset: [`DEFAULT_PROCESSES`].
    pub processes: Option<u64>,
}

/// The default address-space limit. Address space, not memory used: V8 (every npm MCP
/// server) and JVMs reserve several GiB up front, and at 1 GiB Node's garbage collector dies
/// (seen with server-everything); 4 GiB still stops a runaway allocation of that size.
pub const DEFAULT_MEMORY_MB: u64 = 4096;
pub const DEFAULT_PROCESSES: u64 = 64;
/// The smallest address space a dynamically linked program starts in.
const MIN_MEMORY_MB: u64 = 16;

impl Widening {
    /// The first problem, as (field under `sandbox.`, message).
    pub fn check(&self) -> Result<(), (String, String)> {
        if let Network::To(hosts) = &self.network {
            for h in hosts {
                if port_of(h).is_none() {
                    return Err((
                        "network".into(),
                        format!(
                            "'{h}' is not HOST:PORT (e.g. api.example.org:443), or use `true` for any"
                        ),
                    ));
                }
            }
        }
        for (key, paths) in [("read", &self.read), ("write", &self.write)] {
            for p in paths {
                let absolute = p.starts_with('/') || p == "~" || p.starts_with("~/");
                if !absolute {
                    return Err((
                        key.into(),
                        format!("'{p}' must be an absolute path or start with ~/"),
                    ));
                }
                if let Some(why) = proc_refusal(p) {
                    return Err((key.into(), format!("'{p}' {why}")));
                }
            }
        }
        if let Some(m) = self.memory_mb
            && m < MIN_MEMORY_MB
        {
            return Err((
                "memory_mb".into(),
                format!("must be at least {MIN_MEMORY_MB}"),
            ));
        }
        if self.processes == Some(0) {
            return Err(("processes".into(), "must be at least 1".into()));
        }
        Ok(())
    }

    /// The TCP ports it may connect to; `None`: any.
    pub fn ports(&self) -> Option<Vec<u16>> {
        match &self.network {
            Network::Any(true) => None,
            Network::Any(false) => Some(Vec::new()),
            Network::To(hosts) => Some(hosts.iter().filter_map(|h| port_of(h)).collect()),
        }
    }
}

/// Why a `/proc` path may not be granted: `/proc` whole and another process's entry show
/// every process's environment and memory maps (the daemon's secrets among them). The tool's
/// own entry is `/proc/self`, bound to the tool when it starts.
pub fn proc_refusal(path: &str) -> Option<&'static str> {
    let path = lexical(path);
    let rest = path.strip_prefix("/proc")?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    let first = rest.trim_start_matches('/').split('/').next().unwrap_or("");
    let per_process =
        first.is_empty() || first == "thread-self" || first.bytes().all(|b| b.is_ascii_digit());
    per_process.then_some(
        "would show other processes' environment (the daemon's secrets among them); the tool's own entry is /proc/self",
    )
}

/// Whether `path` names the tool's own `/proc` entry (`/proc/self` or a path in it).
pub fn is_proc_self(path: &str) -> bool {
    lexical(path)
        .strip_prefix("/proc/self")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// An absolute path with `.` and `..` taken out as written (`/proc/./1`, `/proc/self/../1`
/// are `/proc/1`); a path that does not start with `/` is returned as it is.
fn lexical(path: &str) -> String {
    if !path.starts_with('/') {
        return path.to_string();
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The port of `HOST:PORT` (`[::1]:443` too), when the host is not empty.
fn port_of(entry: &str) -> Option<u16> {
    let (host, port) = entry.rsplit_once(':')?;
    if host.is_empty() || host == "[" {
        return None;
    }
    port.parse::<u16>().ok().filter(|p| *p != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_entries_need_a_port() {
        assert_eq!(port_of("api.example.org:443"), Some(443));
        assert_eq!(port_of("[::1]:8080"), Some(8080));
        assert_eq!(port_of("api.example.org"), None);
        assert_eq!(port_of(":443"), None);
        assert_eq!(port_of("h:0"), None);
        let w = Widening {
            network: Network::To(vec!["h".into()]),
            ..Default::default()
        };
        assert_eq!(w.check().map_err(|e| e.0), Err("network".to_string()));
    }

    #[test]
    fn only_the_tools_own_proc_entry_and_system_files_of_proc() {
        for bad in [
            "/proc",
            "/proc/",
            "/proc/1",
            "/proc/1/environ",
            "/proc/thread-self",
        ] {
            assert!(proc_refusal(bad).is_some(), "{bad}");
        }
        // Written round about, the same.
        for bad in ["/proc/./1", "/proc/self/../1", "/tmp/../proc", "//proc//1/"] {
            assert!(proc_refusal(bad).is_some(), "{bad}");
        }
        assert!(!is_proc_self("/proc/self/../1"));
        for fine in [
            "/proc/self",
            "/proc/self/mountinfo",
            "/proc/cpuinfo",
            "/process",
            "/tmp",
        ] {
            assert!(proc_refusal(fine).is_none(), "{fine}");
        }
        assert!(is_proc_self("/proc/self") && is_proc_self("/proc/self/mountinfo"));
        assert!(!is_proc_self("/proc/selfish") && !is_proc_self("/proc/1"));
    }

    #[test]
    fn paths_must_be_absolute_and_limits_positive() {
        let rel = Widening {
            read: vec!["docs".into()],
            ..Default::default()
        };
        assert!(rel.check().is_err());
        let tilde = Widening {
            write: vec!["~/Downloads/hermes".into()],
            ..Default::default()
        };
        assert!(tilde.check().is_ok());
        let tiny = Widening {
            memory_mb: Some(1),
            ..Default::default()
        };
        assert!(tiny.check().is_err());
        assert_eq!(Widening::default().ports(), Some(vec![]));
        let any = Widening {
            network: Network::Any(true),
            ..Default::default()
        };
        assert_eq!(any.ports(), None);
    }
}
