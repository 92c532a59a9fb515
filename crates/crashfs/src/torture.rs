//! The power-loss torture (see RELIABILITY.md).
