//! Link options for the `hermes-agent` binary only.
//!
//! A position-independent executable carries one dynamic relocation per pointer in its
//! read-only data (85,000 here, 2 MiB of `.rela.dyn`), and the loader reads all of them at
//! start-up, so they stay resident for the life of the daemon. `-z pack-relative-relocs`
//! stores the relative ones as a bitmap (DT_RELR) of a few KiB instead: the binary stays
//! position-independent (ASLR unchanged) and the daemon is ≈ 2 MiB smaller in memory
//! (BENCHMARKS.md §3). It needs GNU ld ≥ 2.38 or lld to link and glibc ≥ 2.36 to run; an
//! older loader refuses the binary by name (`GLIBC_ABI_DT_RELR`) rather than misbehaving.
//!
//! A release build also lays out its code in the order of `scripts/text-order.txt`: the
//! functions a daemon and a one-shot run actually execute, first and together. The kernel maps
//! a program's code in 64 KiB windows around each page it runs, and the few thousand functions
//! a daemon runs are otherwise spread over nearly every window of 18 MiB of code, so they are
//! what keeps the binary resident: ordered, the idle daemon is 7–13 MiB smaller (BENCHMARKS.md
//! §24). The file names symbols as this toolchain, `Cargo.lock` and the two feature sets it was
//! recorded for (default, and without chat channels) name them; a name that does not match is
//! ignored, so a stale file costs memory, never correctness, and `scripts/text-order.sh` writes
//! it again. The release profile keeps symbols (`strip = "none"`) and this script strips at link
//! time instead, because cargo hashes the profile's `strip` into every symbol name: the build
//! that records the names and the build that uses them must differ only here. (The daemon is
//! built for Linux; elsewhere a release binary keeps its symbols.)

use std::path::Path;
use std::process::Command;

/// The first Rust release that links x86_64 Linux with its own lld by default, which takes a
/// symbol ordering file (GNU ld does not).
const LLD_BY_DEFAULT: u32 = 90;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux" {
        return;
    }
    if var("CARGO_CFG_TARGET_ENV") == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    if var("PROFILE") != "release" {
        return;
    }
    println!("cargo:rerun-if-env-changed=HERMES_KEEP_SYMBOLS");
    if std::env::var_os("HERMES_KEEP_SYMBOLS").is_none() {
        // What the profile's `strip = true` did, without changing the symbols' names.
        println!("cargo:rustc-link-arg-bins=-Wl,--strip-all");
    }
    let order = Path::new(&var("CARGO_MANIFEST_DIR")).join("scripts/text-order.txt");
    println!("cargo:rerun-if-changed={}", order.display());
    println!("cargo:rerun-if-env-changed=HERMES_TEXT_ORDER");
    if var("HERMES_TEXT_ORDER") != "off" && order.is_file() && links_with_lld(&var) {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        // The file lists what one build runs; the others lack some of it, which is expected.
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// Whether rustc links this binary with its bundled lld: x86_64 Linux on a recent enough rustc,
/// and no linker chosen by hand (a configured linker, or flags that name one), which might be
/// GNU ld and refuse the ordering flags.
fn links_with_lld(var: &dyn Fn(&str) -> String) -> bool {
    if var("TARGET") != "x86_64-unknown-linux-gnu" || !var("RUSTC_LINKER").is_empty() {
        return false;
    }
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    if ["linker", "fuse-ld", "link-self-contained"]
        .iter()
        .any(|f| flags.contains(f))
    {
        return false;
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let minor = Command::new(rustc)
        .arg("-V")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| {
            let version = v.split_whitespace().nth(1)?.to_owned();
            version.split('.').nth(1)?.parse::<u32>().ok()
        });
    minor.is_some_and(|m| m >= LLD_BY_DEFAULT)
}
