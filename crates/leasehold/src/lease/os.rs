//! This build's platform, chosen once: `posix/` on Unix, `windows.rs` on Windows, `single.rs`
//! on WASI, each meeting the contract of `platform.rs`. The layers above the platform name it
//! through this file alone: `imp` for its types, `Imp` for its steps.

#[cfg(unix)]
pub(super) use super::posix::{self as imp, Posix as Imp};
#[cfg(target_os = "wasi")]
pub(super) use super::single::{self as imp, Single as Imp};
#[cfg(windows)]
pub(super) use super::windows::{self as imp, Windows as Imp};
