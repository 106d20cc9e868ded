//! The `hermes-agent` binary: everything lives in the library; this only hands over.

fn main() -> std::process::ExitCode {
    hermes_agent::cli::main()
}
