//! The time zone jobs and prompts use: `scheduler.timezone` when it names one, else the
//! machine's own zone (`TZ`, then the zone database file `/etc/localtime` links to, then
//! `/etc/timezone`), else UTC.
//!
//! Owns: that order, and naming where the zone came from (`doctor` shows it). It is resolved
//! here, once, because `TZ` is the environment; everything downstream gets a zone name.
//! Must not: change the process's zone or read anything but the two files it is given.

use chrono_tz::Tz;
use std::path::{Path, PathBuf};

/// Where the machine says its zone is; the real files outside tests.
#[derive(Debug, Clone)]
pub(crate) struct ZoneFiles {
    /// Usually a symlink into the zone database (`/usr/share/zoneinfo/Europe/Berlin`).
    pub localtime: PathBuf,
    /// Debian's one-line zone name, for a `/etc/localtime` copied instead of linked.
    pub timezone: PathBuf,
}

impl ZoneFiles {
    pub(crate) fn system() -> ZoneFiles {
        ZoneFiles {
            localtime: PathBuf::from("/etc/localtime"),
            timezone: PathBuf::from("/etc/timezone"),
        }
    }
}

/// Where the zone in effect came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZoneSource {
    /// `scheduler.timezone` names it.
    Settings,
    /// The `TZ` environment variable.
    TzVar,
    /// The zone database file this link points to.
    Localtime(PathBuf),
    /// The zone named in this file.
    TimezoneFile(PathBuf),
    /// The machine names no zone: UTC, as the C library assumes then too.
    Unknown,
}

/// The zone in effect, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeZone {
    pub tz: Tz,
    pub source: ZoneSource,
    /// A `TZ` that was set but is not a zone name (a POSIX rule such as `CST-8`): passed over,
    /// and said so, since programs that honour it show other times.
    pub ignored_tz: Option<String>,
}

impl TimeZone {
    /// `doctor`'s words for it.
    pub fn describe(&self) -> String {
        let name = self.tz.name();
        let mut out = match &self.source {
            ZoneSource::Settings => format!("{name} (scheduler.timezone)"),
            ZoneSource::TzVar => format!("{name} (the machine's zone, from TZ)"),
            ZoneSource::Localtime(p) => {
                format!(
                    "{name} (the machine's zone, from /etc/localtime → {})",
                    p.display()
                )
            }
            ZoneSource::TimezoneFile(p) => {
                format!("{name} (the machine's zone, from {})", p.display())
            }
            ZoneSource::Unknown => format!(
                "{name} (the machine names no zone: no TZ, no /etc/localtime link, no /etc/timezone)"
            ),
        };
        if let Some(tz) = &self.ignored_tz {
            out.push_str(&format!(
                "; TZ={tz} is not an IANA zone name and was passed over"
            ));
        }
        if self.source != ZoneSource::Settings {
            out.push_str("; set scheduler.timezone to choose one");
        }
        out
    }
}

/// The zone for `setting` (`scheduler.timezone`): itself when it names a zone, else the
/// machine's. A name that is not a zone only gets here unvalidated (settings built in code):
/// it falls back to UTC rather than to a zone nobody chose.
pub(crate) fn resolve(setting: &str, tz_var: Option<&str>, files: &ZoneFiles) -> TimeZone {
    let setting = setting.trim();
    if !setting.is_empty() {
        return TimeZone {
            tz: setting.parse().unwrap_or(Tz::UTC),
            source: ZoneSource::Settings,
            ignored_tz: None,
        };
    }
    machine_zone(tz_var, files)
}

/// The machine's own zone: `TZ`, then `/etc/localtime`'s link, then `/etc/timezone`, else UTC.
pub(crate) fn machine_zone(tz_var: Option<&str>, files: &ZoneFiles) -> TimeZone {
    // glibc's syntax: an optional ':' before a name or a file path.
    let tz_var = tz_var
        .map(|v| v.trim().trim_start_matches(':'))
        .filter(|v| !v.is_empty());
    let mut ignored_tz = None;
    if let Some(v) = tz_var {
        match zone_in(v) {
            Some(tz) => {
                return TimeZone {
                    tz,
                    source: ZoneSource::TzVar,
                    ignored_tz,
                };
            }
            None => ignored_tz = Some(v.to_string()),
        }
    }
    let found = localtime_zone(&files.localtime)
        .map(|(tz, target)| (tz, ZoneSource::Localtime(target)))
        .or_else(|| {
            let text = std::fs::read_to_string(&files.timezone).ok()?;
            let tz = zone_in(text.lines().next()?.trim())?;
            Some((tz, ZoneSource::TimezoneFile(files.timezone.clone())))
        });
    let (tz, source) = found.unwrap_or((Tz::UTC, ZoneSource::Unknown));
    TimeZone {
        tz,
        source,
        ignored_tz,
    }
}

/// The zone a link into the zone database names, with the file it points to. A copied file
/// names nothing (its bytes would have to be matched against the database).
fn localtime_zone(localtime: &Path) -> Option<(Tz, PathBuf)> {
    let target = std::fs::read_link(localtime).ok()?;
    let target = if target.is_relative() {
        localtime
            .parent()
            .map_or(target.clone(), |d| d.join(&target))
    } else {
        target
    };
    if let Some(tz) = zone_in(&target.to_string_lossy()) {
        return Some((tz, target));
    }
    // A link to a link (`/etc/localtime` → `/etc/alternatives/…` → the database).
    let real = std::fs::canonicalize(&target).ok()?;
    zone_in(&real.to_string_lossy()).map(|tz| (tz, real))
}

/// The zone in a name (`Europe/Berlin`) or a path into the zone database
/// (`/usr/share/zoneinfo/posix/Europe/Berlin`).
fn zone_in(text: &str) -> Option<Tz> {
    let name = match text.rsplit_once("zoneinfo/") {
        Some((_, name)) => name,
        None if text.starts_with('/') => return None,
        None => text,
    };
    let name = name
        .strip_prefix("posix/")
        .or_else(|| name.strip_prefix("right/"))
        .unwrap_or(name);
    name.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake `/etc`: `localtime` linking to `link` (when given), `timezone` holding `named`.
    fn etc(link: Option<&str>, named: Option<&str>) -> (tempfile::TempDir, ZoneFiles) {
        let dir = tempfile::tempdir().expect("temp dir");
        let files = ZoneFiles {
            localtime: dir.path().join("localtime"),
            timezone: dir.path().join("timezone"),
        };
        if let Some(target) = link {
            std::os::unix::fs::symlink(target, &files.localtime).expect("symlink");
        }
        if let Some(name) = named {
            std::fs::write(&files.timezone, format!("{name}\n")).expect("write");
        }
        (dir, files)
    }

    #[test]
    fn the_setting_wins_over_the_machine() {
        let (_d, files) = etc(Some("/usr/share/zoneinfo/Europe/Berlin"), None);
        let z = resolve("America/New_York", Some("Asia/Tokyo"), &files);
        assert_eq!(
            (z.tz, z.source),
            (Tz::America__New_York, ZoneSource::Settings)
        );
    }

    #[test]
    fn tz_comes_first_in_any_of_its_forms() {
        let (_d, files) = etc(Some("/usr/share/zoneinfo/Europe/Berlin"), None);
        for tz in [
            "Asia/Tokyo",
            ":Asia/Tokyo",
            "/usr/share/zoneinfo/Asia/Tokyo",
            ":/usr/share/zoneinfo/posix/Asia/Tokyo",
        ] {
            let z = resolve("", Some(tz), &files);
            assert_eq!(
                (z.tz, &z.source),
                (Tz::Asia__Tokyo, &ZoneSource::TzVar),
                "{tz}"
            );
            assert_eq!(z.ignored_tz, None);
        }
    }

    #[test]
    fn without_tz_the_localtime_link_names_the_zone() {
        for unset in [None, Some(""), Some(" ")] {
            let (_d, files) = etc(
                Some("/usr/share/zoneinfo/Europe/Berlin"),
                Some("Asia/Tokyo"),
            );
            let z = resolve("", unset, &files);
            assert_eq!(z.tz, Tz::Europe__Berlin, "{unset:?}");
            assert_eq!(
                z.source,
                ZoneSource::Localtime("/usr/share/zoneinfo/Europe/Berlin".into())
            );
            assert!(z.describe().contains("Europe/Berlin"), "{}", z.describe());
        }
        // Relative, as `ln -s ../usr/share/zoneinfo/…` makes it (the target need not exist).
        let (_d, files) = etc(Some("../usr/share/zoneinfo/America/Sao_Paulo"), None);
        assert_eq!(machine_zone(None, &files).tz, Tz::America__Sao_Paulo);
    }

    #[test]
    fn a_link_to_a_link_is_followed_into_the_database() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("zoneinfo/Pacific");
        std::fs::create_dir_all(&db).expect("mkdir");
        std::fs::write(db.join("Auckland"), "TZif").expect("write");
        let alt = dir.path().join("alternative");
        std::os::unix::fs::symlink(db.join("Auckland"), &alt).expect("symlink");
        let files = ZoneFiles {
            localtime: dir.path().join("localtime"),
            timezone: dir.path().join("timezone"),
        };
        std::os::unix::fs::symlink(&alt, &files.localtime).expect("symlink");
        assert_eq!(machine_zone(None, &files).tz, Tz::Pacific__Auckland);
    }

    #[test]
    fn a_copied_localtime_falls_back_to_etc_timezone() {
        let (_d, files) = etc(None, Some("Europe/Lisbon"));
        std::fs::write(&files.localtime, "TZif copied bytes").expect("write");
        let z = machine_zone(None, &files);
        assert_eq!(z.tz, Tz::Europe__Lisbon);
        assert_eq!(z.source, ZoneSource::TimezoneFile(files.timezone.clone()));
    }

    #[test]
    fn unknown_is_utc_and_says_so() {
        let (_d, files) = etc(None, None);
        let z = resolve("", None, &files);
        assert_eq!((z.tz, &z.source), (Tz::UTC, &ZoneSource::Unknown));
        assert!(
            z.describe().starts_with("UTC (the machine names no zone"),
            "{}",
            z.describe()
        );
        // A link out of the database, or a file naming no zone, names nothing either.
        let (_d, files) = etc(Some("/tmp/not-a-zone"), Some("Mars/Olympus"));
        assert_eq!(machine_zone(None, &files).source, ZoneSource::Unknown);
    }

    #[test]
    fn a_tz_that_is_no_zone_name_is_passed_over_and_named() {
        let (_d, files) = etc(Some("/usr/share/zoneinfo/Europe/Berlin"), None);
        let z = resolve("", Some("CST-8"), &files);
        assert_eq!(z.tz, Tz::Europe__Berlin);
        assert_eq!(z.ignored_tz.as_deref(), Some("CST-8"));
        assert!(
            z.describe().contains("TZ=CST-8 is not an IANA zone name"),
            "{}",
            z.describe()
        );
    }
}
