"""leasehold_lock.Document across real processes: children speak in lines, never sleeps."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

import leasehold_lock
from leasehold_lock import Document, LeaseError

WORKERS = 4
INCREMENTS = 200

#: argv: path, mode ("lease" | "plain"), n. Says "ready", waits for a line, increments n times.
INCREMENT = """
import json, os, sys
from leasehold_lock import Document
path, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
doc = Document(path)
print("ready", flush=True)
sys.stdin.readline()
def bump(d):
    d = d or {}
    d["n"] = d.get("n", 0) + 1
    return d
for _ in range(n):
    if mode == "lease":
        doc.update(bump, timeout=60)
    else:
        # The negative control: atomic (os.replace) but without the lease.
        try:
            with open(path) as f:
                d = json.load(f)
        except FileNotFoundError:
            d = None
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(bump(d), f)
        os.replace(tmp, path)
print("done", flush=True)
"""

#: argv: path. One try-once update; says "updated" or "contended".
TRY = """
import sys
from leasehold_lock import Document, Timeout
try:
    Document(sys.argv[1]).update(lambda d: {"n": (d or {}).get("n", 0) + 1}, timeout=0)
    print("updated", flush=True)
except Timeout:
    print("contended", flush=True)
"""

#: argv: path, n. n increments, each announced with its version and acknowledged.
PACED = """
import sys
from leasehold_lock import Document
doc = Document(sys.argv[1])
for _ in range(int(sys.argv[2])):
    doc.update(lambda d: {"n": (d or {}).get("n", 0) + 1}, timeout=60)
    print("version", doc.snapshot().version, flush=True)
    sys.stdin.readline()
print("done", flush=True)
"""

#: argv: path. Holds the lease in an edit block until told, then leaves it normally.
HOLD = """
import sys
from leasehold_lock import Document
with Document(sys.argv[1]).edit(timeout=60) as d:
    d["held"] = True
    print("editing", flush=True)
    sys.stdin.readline()
print("done", flush=True)
"""


def race(spawn, path: str, mode: str) -> int:
    workers = [spawn(INCREMENT, path, mode, str(INCREMENTS)) for _ in range(WORKERS)]
    for w in workers:
        w.expect("ready")
    for w in workers:
        w.send("go")
    for w in workers:
        w.expect("done", limit=120)
        assert w.wait(limit=60) == 0
    with open(path) as f:
        return json.load(f)["n"]


def test_four_processes_of_200_updates_lose_none(spawn, tmp_path):
    path = str(tmp_path / "count.json")
    assert race(spawn, path, "lease") == WORKERS * INCREMENTS
    assert sorted(os.listdir(tmp_path)) == ["count.json", "count.json.lock"]


def test_the_same_increments_without_the_lease_lose_some(spawn, tmp_path):
    path = str(tmp_path / "count.json")
    total = race(spawn, path, "plain")
    assert total < WORKERS * INCREMENTS, f"nothing lost ({total}): the harness does not race"


def test_edit_writes_on_a_clean_exit_nothing_on_an_exception_and_holds_the_lease(spawn, tmp_path):
    path = str(tmp_path / "settings.json")
    doc = Document(path)
    with pytest.raises(RuntimeError):
        with doc.edit(timeout=5) as data:
            assert data == {}
            data["x"] = 1
            assert spawn(TRY, path).line() == "contended"
            raise RuntimeError("changed my mind")
    assert doc.read() is None
    assert spawn(TRY, path).line() == "updated"
    with doc.edit(timeout=5) as data:
        assert data == {"n": 1}
        data["x"] = 2
    assert doc.read() == {"n": 1, "x": 2}


def test_read_takes_no_lock_while_another_process_edits(spawn, tmp_path):
    path = str(tmp_path / "settings.json")
    doc = Document(path)
    doc.update(lambda _: {"v": 1})
    holder = spawn(HOLD, path)
    holder.expect("editing")
    assert doc.read() == {"v": 1}
    with pytest.raises(leasehold_lock.Timeout):
        doc.update(lambda d: d, timeout=0)
    holder.send()
    holder.expect("done")
    assert doc.read() == {"v": 1, "held": True}


def test_update_if_loses_to_a_concurrent_update_and_says_so(spawn, tmp_path):
    path = str(tmp_path / "count.json")
    doc = Document(path)
    doc.update(lambda _: {"n": 1})
    seen = doc.snapshot()
    other = spawn(PACED, path, "1")
    theirs = other.expect("version")[1]
    other.send()
    other.expect("done")
    with pytest.raises(LeaseError) as err:
        doc.update_if(seen.version, lambda d: {"n": 100}, timeout=5)
    assert err.value.code == "CONFLICT"
    assert theirs in str(err.value)
    assert doc.read() == {"n": 2}
    assert doc.update_if(theirs, lambda d: {"n": d["n"] + 1}, timeout=5) == {"n": 3}


def test_update_async_holds_the_lease_while_an_async_fn_runs(spawn, tmp_path):
    path = str(tmp_path / "count.json")
    doc = Document(path)

    async def bump(d):
        # Another process tries while this change is in progress.
        child = spawn(TRY, path)
        said = await asyncio.get_running_loop().run_in_executor(None, child.line)
        assert said == "contended"
        return {"n": (d or {}).get("n", 0) + 1}

    assert asyncio.run(doc.update_async(bump, timeout=5)) == {"n": 1}
    assert spawn(TRY, path).line() == "updated"
    assert doc.read() == {"n": 2}


def test_watch_sees_every_version_another_process_writes(spawn, tmp_path):
    path = str(tmp_path / "count.json")
    doc = Document(path)
    watch = doc.watch()
    other = spawn(PACED, path, "30")
    for i in range(1, 31):
        version = other.expect("version")[1]
        snap = next(watch)
        assert snap.version == version
        assert snap.value == {"n": i}
        other.send()
    other.expect("done")


def test_async_watch_sees_a_version_another_process_writes(spawn, tmp_path):
    path = str(tmp_path / "count.json")
    doc = Document(path)

    async def main():
        watch = doc.watch()
        other = spawn(PACED, path, "1")
        snap = await watch.__anext__()
        assert snap.value == {"n": 1}
        assert other.expect("version")[1] == snap.version

    asyncio.run(main())


def test_a_document_that_does_not_parse_is_reported_and_left_as_it_is(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("{ torn")
    doc = Document(path)
    with pytest.raises(LeaseError) as err:
        doc.update(lambda d: {}, timeout=5)
    assert err.value.code == "INVALID_INPUT"
    assert "settings.json" in str(err.value)
    with pytest.raises(LeaseError):
        with doc.edit(timeout=5):
            pass
    assert path.read_text() == "{ torn"


def test_a_symlink_at_the_path_is_refused_naming_it(tmp_path):
    target = tmp_path / "target.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    for call in (lambda: Document(link).read(), lambda: Document(link).update(lambda d: {"x": 1})):
        with pytest.raises(LeaseError) as err:
            call()
        assert err.value.code == "INVALID_INPUT"
        assert "link.json" in str(err.value)
    assert target.read_text() == "{}"


def test_text_and_bytes_encodings(tmp_path):
    text = Document(tmp_path / "notes.txt", encoding="text")
    assert text.update(lambda s: (s or "") + "héllo") == "héllo"
    assert text.read() == "héllo"
    raw = Document(tmp_path / "blob", encoding="bytes", lock_path=tmp_path / "my.lock")
    raw.update(lambda b: b"\x00\x01")
    assert raw.read() == b"\x00\x01"
    assert os.path.exists(tmp_path / "my.lock")
    with pytest.raises(ValueError):
        Document(tmp_path / "x", encoding="yaml")


#: The CLI's increment of {"n": N}: COMMAND reads the document, keeps its digits, adds one.
CLI_LOOP = """
echo ready; read _go
i=0
while [ $i -lt {n} ]; do
  "$CLI" doc update --timeout 60 "$F" -- sh -c 'n=$(tr -dc 0-9); echo "{{\\"n\\": $((${{n:-0}} + 1))}}"' >/dev/null || exit 1
  i=$((i+1))
done
echo done
"""


def test_python_and_the_cli_mixed_on_one_document_lose_none(spawn, spawn_argv, cli, tmp_path):
    path = str(tmp_path / "count.json")
    pythons = [spawn(INCREMENT, path, "lease", str(INCREMENTS)) for _ in range(2)]
    script = CLI_LOOP.format(n=INCREMENTS)
    shells = []
    for _ in range(2):
        child = spawn_argv(["sh", "-c", f'CLI="$1" F="$2"; {script}', "sh", cli, path])
        shells.append(child)
    everyone = pythons + shells
    for w in everyone:
        w.expect("ready")
    for w in everyone:
        w.send("go")
    for w in everyone:
        w.expect("done", limit=120)
        assert w.wait(limit=60) == 0
    assert Document(path).read() == {"n": 4 * INCREMENTS}
