//! Link options for the `hermes-agent` binary only.
//!
//! A position-independent executable carries one dynamic relocation per pointer in its
//! read-only data (85,000 here, 2 MiB of `.rela.dyn`), and the loader reads all of them at
//! start-up, so they stay resident for the life of the daemon. `-z pack-relative-relocs`
//! stores the relative ones as a bitmap (DT_RELR) of a few KiB instead: the binary stays
//! position-independent (ASLR unchanged) and the daemon is ≈ 2 MiB smaller in memory
//! (BENCHMARKS.md §3). It needs GNU ld ≥ 2.38 or lld to link and glibc ≥ 2.36 to run; an
//! older loader refuses the binary by name (`GLIBC_ABI_DT_RELR`) rather than misbehaving.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
