//! The build script of every crate that has a portable code path (README, "Platforms"):
//! `LEASEHOLD_PORTABLE=1` builds the crate with `--cfg leasehold_portable`, the code macOS and
//! the BSDs run (no `/proc/locks`, no waiting marks, self-pipes), on Linux. Setting the cfg
//! here rather than through `RUSTFLAGS` leaves every dependency's build untouched, so the
//! portable suite reuses them instead of rebuilding all of them (CI time, issue 13).
//! `RUSTFLAGS="--cfg leasehold_portable"` still works the same.

fn main() {
    println!("cargo::rerun-if-env-changed=LEASEHOLD_PORTABLE");
    if std::env::var_os("LEASEHOLD_PORTABLE").is_some_and(|v| v == "1") {
        println!("cargo::rustc-cfg=leasehold_portable");
    }
}
