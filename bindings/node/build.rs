//! napi-rs's link setup for a Node addon (macOS: undefined napi_* symbols are looked up in the
//! loading `node` process).
fn main() {
    napi_build::setup();
}
