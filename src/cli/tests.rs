//! Checks over the command line's own sources.

/// `[(name, source, allowed)]` for files of this directory.
macro_rules! sources {
    ($($name:literal => $allowed:literal),* $(,)?) => {
        [$(($name, include_str!($name), $allowed)),*]
    };
}

/// Every source file of the command line, with how many raw print macros it may hold: the
/// body of `errln!` (mod.rs; stdout is written by `write_out`, which a closed pipe does not
/// panic). The daemon's client (`hermes_surfaces::client`) prints nothing at all.
const SOURCES: [(&str, &str, usize); 12] = sources![
    "mod.rs" => 1, "render.rs" => 0, "run.rs" => 0, "tasks.rs" => 0, "jobs.rs" => 0,
    "memory.rs" => 0, "doctor.rs" => 0, "config.rs" => 0, "service.rs" => 0, "table.rs" => 0,
    "mcp.rs" => 0, "backend.rs" => 0,
];

/// What a person reads goes through `outln!`, `out!` or `errln!` (and so `for_terminal`): a
/// raw `println!` would let an answer or a server's text drive the terminal.
#[test]
fn human_output_goes_through_the_escaping_macros() {
    for (name, source, allowed) in SOURCES {
        let raw = source.matches("println!(").count() + source.matches("print!(").count();
        assert_eq!(
            raw, allowed,
            "src/cli/{name}: print with outln!/out!/errln! (or render::print_json for --json)"
        );
    }
}

/// An empty id is refused as the arguments are read, the same with or without a daemon.
#[test]
fn an_empty_id_is_refused_before_anything_runs() {
    use clap::Parser;
    for args in [
        &["tasks", "show", ""][..],
        &["tasks", "watch", " "],
        &["jobs", "rm", ""],
        &["jobs", "run", ""],
        &["approvals", "approve", ""],
        &["approvals", "deny", ""],
        &["memory", "forget", ""],
    ] {
        let argv = std::iter::once("hermes-agent").chain(args.iter().copied());
        let e = super::Cli::try_parse_from(argv).expect_err("refused");
        assert!(
            e.to_string().contains("an id cannot be empty"),
            "{args:?}: {e}"
        );
    }
    let argv = ["hermes-agent", "tasks", "show", " 4f2a "];
    match super::Cli::try_parse_from(argv).map(|c| c.command) {
        Ok(super::Command::Tasks(super::TasksCmd::Show { id, .. })) => assert_eq!(id, "4f2a"),
        other => panic!("{other:?}"),
    }
}
