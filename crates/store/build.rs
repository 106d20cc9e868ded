//! Rebuilds the store when a migration is added.
//!
//! `sqlx::migrate!` embeds `migrations/` at compile time, and cargo reruns a proc macro only
//! when a file it knows changes. A new migration is a new file, so without this the binary and
//! the tests would keep migrating to the schema of the last build.

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
