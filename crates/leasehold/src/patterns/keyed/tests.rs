//! Unit tests of the namespace's kept collector-lock descriptors.

use super::*;
use crate::Budget;

/// Two acquisitions in flight through one namespace each hold the collector lock on a
/// descriptor of their own: `flock` on one open file description does not count its
/// holders, so if they shared one, the first to leave (`LOCK_UN`) would let a collection
/// in while the other is still between open and verify.
#[test]
fn acquisitions_in_flight_each_hold_the_collector_lock_on_their_own_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    let ns = Namespace::new(LockDir::create(dir.path()).unwrap());
    let options = LeaseOptions::new();
    let once = Budget::no_wait();
    let collect = || {
        options
            .create(true)
            .acquire_at_mode(&ns.dir, COLLECTOR_LOCK, &once, Mode::Exclusive)
    };
    // A collection made the collector lock (acquisitions never create it).
    drop(collect().expect("free"));
    let (mut first, mut second) = (ns.door(&options).unwrap(), ns.door(&options).unwrap());
    let held_first = first.handle.lock(&once).unwrap();
    let held_second = second.handle.lock(&once).unwrap();
    drop(held_first);
    assert!(
        collect().unwrap_err().is_contended(),
        "the second still holds it"
    );
    drop(held_second);
    drop(collect().expect("both left"));
    ns.keep(first);
    ns.keep(second);
    assert_eq!(
        guard(&ns.doors).kept.len(),
        2,
        "both kept for the next ones"
    );
    ns.renew_doors();
    let third = ns.door(&options).unwrap();
    assert_eq!(guard(&ns.doors).kept.len(), 0, "a check closed them");
    ns.keep(third);
}
