"""A contender of ``leasehold bench --contender LABEL=COMMAND``: one worker process of the
uncued back-to-back table (role ``loop``) or of the uncontended row (role ``cycle``), taking
the lock with one of Python's lockers, each with its defaults and waiting:

* ``leasehold``: ``leasehold_lock.acquire(path)`` (no timeout), then ``Lease.release()``;
* ``filelock``: one ``filelock.FileLock(path)``, ``acquire()`` / ``release()`` (it polls every
  50 ms while contended);
* ``portalocker``: one ``portalocker.Lock(path)``, ``acquire()`` / ``release()`` (it polls every
  0.25 s and gives up after 5 s; a give-up is retried at once and counts as the same wait).

Usage (from the repository root; one venv holding all three packages, ``pip install
bindings/python filelock portalocker``, which builds leasehold in release mode)::

    leasehold bench --contender python="$VENV/bin/python bindings/python/bench/worker.py leasehold" \\
                    --contender filelock="$VENV/bin/python bindings/python/bench/worker.py filelock" \\
                    --contender portalocker="$VENV/bin/python bindings/python/bench/worker.py portalocker"

The protocol is the built-in ``loop`` worker's (``crates/leasehold-lab/src/bench/worker.rs``):
environment ``LEASEHOLD_BENCH_ROLE``, ``LEASEHOLD_BENCH_LOCK``, ``LEASEHOLD_BENCH_HOLD_NS`` (and
``LEASEHOLD_BENCH_CYCLES`` for ``cycle``); print ``R``, read ``go <end ns>``, run, and only then
report: ``r <start> <acquired> <released>`` per acquisition and ``D <count>`` (``loop``), or
``b <ns per batch of 100 cycles>`` per batch and ``D <batches>`` (``cycle``). Stamps are
``time.monotonic_ns()``, which is CLOCK_MONOTONIC on Linux, the clock the bench reads.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, List, Tuple

BATCH = 100


def lockers(name: str, path: str) -> Tuple[Callable[[], object], Callable[[object], None]]:
    """(acquire, release) for the named locker, set up once as its users do."""
    if name == "leasehold":
        import leasehold_lock

        acquire = leasehold_lock.acquire
        return (lambda: acquire(path)), (lambda lease: lease.release())  # type: ignore[attr-defined]
    if name == "filelock":
        import filelock

        lock = filelock.FileLock(path)
        return (lambda: lock.acquire()), (lambda _: lock.release())
    if name == "portalocker":
        import portalocker

        plock = portalocker.Lock(path)

        def take() -> object:
            while True:
                try:
                    return plock.acquire()
                except portalocker.exceptions.LockException:
                    continue  # its default 5 s timeout ran out: still the same wait

        return take, (lambda _: plock.release())
    raise SystemExit(f"worker.py: unknown locker {name!r} (leasehold, filelock or portalocker)")


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: worker.py leasehold|filelock|portalocker")
    role = os.environ["LEASEHOLD_BENCH_ROLE"]
    path = os.environ["LEASEHOLD_BENCH_LOCK"]
    hold = int(os.environ.get("LEASEHOLD_BENCH_HOLD_NS", "100000")) / 1e9
    acquire, release = lockers(sys.argv[1], path)
    now = time.monotonic_ns
    sleep = time.sleep
    print("R", flush=True)
    cue = sys.stdin.readline().split()
    if not cue or cue[0] != "go":
        raise SystemExit(f"worker.py: expected 'go', got {cue!r}")
    out: List[str] = []
    if role == "loop":
        end = int(cue[1])
        turns: List[Tuple[int, int, int]] = []
        record = turns.append
        while True:
            t0 = now()
            if t0 >= end:
                break
            held = acquire()
            t1 = now()
            sleep(hold)
            t2 = now()
            release(held)
            record((t0, t1, t2))
        out = [f"r {a} {b} {c}" for a, b, c in turns]
        out.append(f"D {len(turns)}")
    elif role == "cycle":
        batches = max(1, int(os.environ["LEASEHOLD_BENCH_CYCLES"]) // BATCH)
        spans: List[int] = []
        for _ in range(batches):
            t0 = now()
            for _ in range(BATCH):
                release(acquire())
            spans.append(now() - t0)
        out = [f"b {ns}" for ns in spans]
        out.append(f"D {len(spans)}")
    else:
        raise SystemExit(f"worker.py: unknown role {role!r}")
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
