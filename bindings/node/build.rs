//! napi-rs's link setup for a Node addon (macOS: undefined napi_* symbols are looked up in the
//! loading `node` process; GNU/Linux: `-z nodelete`).
//!
//! Not for `*-windows-gnu`: there `napi_build::setup` links against a `libnode.dll` it must find
//! on this machine, and panics without one — but napi-sys's `dyn-symbols` (on in Cargo.toml)
//! already loads every napi_* function from the host `node` process at run time, so nothing
//! needs linking, and the cross-build (and CI's cross-lint) needs no Node for Windows.
fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") == "windows" && var("CARGO_CFG_TARGET_ENV") == "gnu" {
        return;
    }
    napi_build::setup();
}
