//! `LEASEHOLD_PORTABLE=1` builds this crate with `--cfg leasehold_portable`: on Linux, the
//! code macOS and the BSDs run (no `/proc/locks`, no waiting marks, self-pipes), so that CI
//! tests that path where it has no Mac (docs/platforms.md). Setting the cfg here rather than
//! through `RUSTFLAGS` leaves every other crate's build untouched, so the portable suite
//! reuses them instead of rebuilding all of them. `RUSTFLAGS="--cfg leasehold_portable"`
//! works the same. Only this crate has the cfg: the other crates' tests ask the library at
//! run time what it can tell (`testkit::reveals_holders`).

fn main() {
    println!("cargo::rerun-if-env-changed=LEASEHOLD_PORTABLE");
    if std::env::var_os("LEASEHOLD_PORTABLE").is_some_and(|v| v == "1") {
        println!("cargo::rustc-cfg=leasehold_portable");
    }
}
