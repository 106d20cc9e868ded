//! Tests of where the settings file's paths lead and how its mistakes are worded.

use super::tests::env;
use super::*;

#[test]
fn relative_paths_resolve_against_the_config_file_and_tilde_is_the_home() {
    let src = ConfigSource::File(PathBuf::from("/home/u/.config/hermes-agent/settings.yaml"));
    let e = env(&[("HOME", "/home/u")]);
    assert_eq!(
        resolve_relative(&src, &e, "./tools"),
        PathBuf::from("/home/u/.config/hermes-agent/./tools")
    );
    assert_eq!(
        resolve_relative(&src, &e, "/opt/t"),
        PathBuf::from("/opt/t")
    );
    assert_eq!(
        resolve_relative(&src, &e, "~/hermes-data"),
        PathBuf::from("/home/u/hermes-data")
    );
    assert_eq!(resolve_relative(&src, &e, "~"), PathBuf::from("/home/u"));
    // The data dir too, wherever the command starts from.
    let mut settings = Settings::default();
    settings.storage.data_dir = "hermes-data".into();
    let sources = Sources::default();
    assert_eq!(
        resolve_data_dir(&sources, &e, &settings, &src).unwrap(),
        PathBuf::from("/home/u/.config/hermes-agent/hermes-data")
    );
}

#[test]
fn loopback_hosts() {
    use crate::is_loopback_host;
    assert!(is_loopback_host("127.0.0.1"));
    assert!(is_loopback_host("127.8.0.1"));
    assert!(is_loopback_host("::1"));
    assert!(is_loopback_host("[::1]"));
    assert!(is_loopback_host("localhost"));
    assert!(!is_loopback_host("0.0.0.0"));
    assert!(!is_loopback_host("192.168.1.4"));
    assert!(!is_loopback_host("example.org"));
}

#[test]
fn a_duplicate_key_and_a_list_instead_of_a_map_are_said_in_the_files_words() {
    let dup = "model:\n  profiles:\n    fast:\n      tool_mode: text\n      tool_mode: auto\n";
    let e = read_yaml::<Settings>(dup, &env(&[])).unwrap_err();
    assert_eq!(e.line, Some(5));
    assert_eq!(
        e.message,
        "'tool_mode' is written twice in the same section; keep one"
    );
    let list = read_yaml::<Settings>("- a\n- b\n", &env(&[])).unwrap_err();
    assert!(list.message.contains("`key: value`"), "{}", list.message);
}
