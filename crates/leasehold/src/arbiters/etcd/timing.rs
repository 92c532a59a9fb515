//! The arithmetic of a lease's validity: the TTL's bounds, the margin a holder keeps, the
//! keep-alive schedule, and the clock they are measured on.

use std::time::Duration;

/// The smallest lease TTL accepted. Below it, a keep-alive every TTL/3 leaves too little
/// slack for a loaded machine, and etcd's own minimum (1.5 × its election timeout) is near.
pub const MIN_TTL: Duration = Duration::from_secs(2);
/// The default lease TTL: how long a crashed holder can keep the lock from a successor.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// How long connecting may take before the endpoints count as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one request (grant, transaction, read, revoke) may take.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// How much earlier than the TTL a grant counts itself lost: a tenth of the TTL, at least
/// 200 ms — the time the holder needs to stop writing after it noticed.
pub fn margin(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(200))
}

/// How often keep-alives go for a lease of `ttl` whose holder starts stopping `grace`
/// before its deadline (0 for a holder that only checks [`Grant::verify`](crate::patterns::authority::Grant::verify)), at a round trip
/// of `round_trip`; `Err` with the arithmetic when no period can hold.
///
/// From a keep-alive's send, the holder has `budget = ttl − margin − grace` before it
/// starts stopping. The next keep-alive goes `period` after the answer, and its answer is
/// back `period + 2 × round_trip` after the first's send: that must come within the budget.
/// The period is half of what the round trips leave, `(budget − 2 × round_trip) / 2`, so
/// that as much again is slack for a slow answer — and never more than `ttl / 3`. A period
/// shorter than a round trip cannot hold (keep-alives would queue behind their answers):
/// so `budget ≥ 4 × round_trip` is required.
pub fn keep_alive_period(
    ttl: Duration,
    grace: Duration,
    round_trip: Duration,
) -> std::result::Result<Duration, String> {
    let margin = margin(ttl);
    let budget = ttl.saturating_sub(margin).saturating_sub(grace);
    let needed = round_trip.saturating_mul(4);
    if budget < needed || budget.is_zero() {
        return Err(format!(
            "a keep-alive cannot be renewed in time at the round trip measured ({:.3} s): TTL {:.1} s − margin {:.1} s − grace {:.1} s = {:.3} s, less than 4 × the round trip = {:.3} s (two round trips, and as much again as slack); raise --ttl, lower --grace, or use an etcd nearer to this machine",
            round_trip.as_secs_f64(),
            ttl.as_secs_f64(),
            margin.as_secs_f64(),
            grace.as_secs_f64(),
            budget.as_secs_f64(),
            needed.as_secs_f64()
        ));
    }
    Ok(((budget - round_trip * 2) / 2).min(ttl / 3))
}

/// Nanoseconds of a clock that keeps counting through suspend (CLOCK_BOOTTIME on Linux).
pub(super) fn now() -> u64 {
    #[cfg(target_os = "linux")]
    let id = rustix::time::ClockId::Boottime;
    #[cfg(not(target_os = "linux"))]
    let id = rustix::time::ClockId::Monotonic;
    let t = rustix::time::clock_gettime(id);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
