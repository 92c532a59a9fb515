'use strict'
// onSharedMount's record lease on the two-mount bed: two bindfs mounts of one directory, on
// which a kernel lock through one does not exclude one through the other (checked first) —
// as two NFS clients with local_lock=all. Node holders in child processes, the leasehold
// CLI's `run` (LEASEHOLD_SHARED_MOUNT=record:SECS) on the other side; handshakes by lines.
const test = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } = require('node:fs')
const { tmpdir } = require('node:os')
const { join } = require('node:path')
const { Worker } = require('node:worker_threads')
const { lh, PKG, CLI, skip, tempDir, Child, nodeChild, until, within } = require('./helpers')

const { Lease, Document, Registry, SessionLog, ResultStore } = lh
const record = (ttlMs) => ({ onSharedMount: { record: { ttlMs } } })

/**
 * What a test undoes when it ends, last first: its children stopped before the mounts they
 * use are unmounted, the mounts before their directory is removed.
 */
function undoer (t) {
  const steps = []
  t.after(async () => {
    for (const step of steps.reverse()) await step()
  })
  return (step) => steps.push(step)
}

/** A bindfs mount of `backing` at `mnt`, unmounted when the test ends; false if it failed. */
function bindfs (later, backing, mnt) {
  mkdirSync(mnt, { recursive: true })
  const got = spawnSync('bindfs', [backing, mnt])
  if (got.status !== 0) return false
  // Lazily (-z): a released record lease's directory descriptor stays open until the
  // garbage collector finalizes its object, which would keep the mount busy.
  later(() => {
    if (spawnSync('fusermount3', ['-uz', mnt]).status !== 0) spawnSync('fusermount', ['-uz', mnt])
  })
  return true
}

/**
 * Two mounts of one directory that the kernel's lock does not cross, as `[a, b]`, or null
 * after a SKIP line (no bindfs, no FUSE, no CLI, or a kernel lock that does cross them here).
 * `later` undoes them.
 */
function twoMounts (t, later) {
  if (process.platform !== 'linux') return skip(t, 'record lease test', 'the two-mount bed is Linux-only (bindfs)') ?? null
  if (CLI === null) return skip(t, 'record lease test', 'the leasehold CLI is not built in this target dir') ?? null
  if (spawnSync('bindfs', ['--version']).error) return skip(t, 'FUSE test', 'bindfs is not installed (apt-get install bindfs)') ?? null
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-node-bed-'))
  later(() => rmSync(dir, { recursive: true, force: true }))
  const backing = join(dir, 'backing')
  mkdirSync(backing)
  const [a, b] = [join(dir, 'mnt'), join(dir, 'mnt-2')]
  if (!bindfs(later, backing, a) || !bindfs(later, backing, b)) return skip(t, 'FUSE test', 'bindfs could not mount here') ?? null
  // The kernel's lock through one mount, then a kernel lock through the other in another
  // process: it must be had, or the mounts are not two hosts.
  const held = Lease.tryAcquire(join(a, 'probe.lock'), { allowNetworkFs: true })
  assert.ok(held, 'the probe lock is free')
  const other = spawnSync(CLI, ['run', '--no-wait', join(b, 'probe.lock'), '--', 'true'], {
    env: { ...process.env, LEASEHOLD_ALLOW_NETWORK_FS: '1' }
  })
  held.release()
  if (other.status !== 0) {
    return skip(t, 'record lease test', 'a kernel lock through one bindfs mount excludes the other here, so they are not two hosts') ?? null
  }
  return [a, b]
}

/** A `leasehold run` with a record lease (TTL 60 s) on `lock`, printing `ran TOKEN`. */
function runOnce (lock, ...flags) {
  return spawnSync(CLI, ['run', ...flags, lock, '--', 'sh', '-c', 'echo ran $LEASEHOLD_FENCING_TOKEN'], {
    env: { ...process.env, LEASEHOLD_SHARED_MOUNT: 'record:60' },
    encoding: 'utf8'
  })
}

/** A `leasehold run` holding the record lease on `lock`: prints `locked TOKEN`, waits for a line. */
function cliHolder (lock) {
  return new Child(CLI, ['run', lock, '--', 'sh', '-c', 'echo locked $LEASEHOLD_FENCING_TOKEN; read _ignored; echo done'], {
    env: { ...process.env, LEASEHOLD_SHARED_MOUNT: 'record:60' }
  })
}

/** The refusal's naming of the option, as every face of this package words it. */
const RECORD_NAMED = /take a record lease there, which excludes across hosts \(exclusive leases; the option onSharedMount: \{ record: \{ ttlMs \} \} \(of Lease\.acquire, Lease\.tryAcquire, Document\.open, Registry\.open, SessionLog\.open or ResultStore\.open\)\), or opt in with the option allowNetworkFs: true/

test('onSharedMount: without it a host-only mount is refused, naming the option; a bad TTL is refused', async (t) => {
  const later = undoer(t)
  const mounts = twoMounts(t, later)
  if (mounts === null) return
  const lock = join(mounts[0], 'job.lock')
  const named = RECORD_NAMED
  assert.throws(() => Lease.tryAcquire(lock), (e) => e.code === 'NETWORK_FS' && named.test(e.message) && !/LeaseOptions|SharedMount::/.test(e.message))
  await assert.rejects(Lease.acquire(lock, { timeoutMs: 1000 }), (e) => e.code === 'NETWORK_FS' && named.test(e.message))
  assert.throws(() => Lease.tryAcquire(lock, { onSharedMount: 'refuse' }), (e) => e.code === 'NETWORK_FS')
  for (const bad of [{ record: { ttlMs: -1 } }, { record: { ttlMs: NaN } }, { record: { ttlMs: Infinity } }, { record: { ttlMs: 0 } }]) {
    assert.throws(() => Lease.tryAcquire(lock, { onSharedMount: bad }), (e) => e.code === 'INVALID_INPUT' && e.message.includes('onSharedMount.record.ttlMs'), JSON.stringify(bad))
  }
  for (const bad of ['record', { record: 10 }, { record: { ttl: 10 } }, null]) {
    assert.throws(() => Lease.tryAcquire(lock, { onSharedMount: bad }), (e) => e.code === 'INVALID_INPUT' && e.message.includes('onSharedMount'), JSON.stringify(bad))
  }
  // On a local disk the option changes nothing: the kernel's lease, without a token.
  const local = Lease.tryAcquire(join(tempDir(t), 'local.lock'), record(60000))
  assert.equal(local.fencingToken, null)
  local.release()
})

test('onSharedMount: a Node holder through one mount excludes leasehold run through the other, and the other way round; tokens grow', async (t) => {
  const later = undoer(t)
  const mounts = twoMounts(t, later)
  if (mounts === null) return
  const [lockA, lockB] = [join(mounts[0], 'job.lock'), join(mounts[1], 'job.lock')]

  // A Node holder through A: the CLI through B cannot have it.
  const node = nodeChild('record', lockA, '60000')
  later(() => node.kill())
  assert.equal(await node.line(), `H ${token(1)}`)
  const busy = runOnce(lockB, '--no-wait')
  assert.equal(busy.status, 75, busy.stderr)
  assert.equal(busy.stdout, '')
  // Through the other mount the holder is of another host (the record lease's host identity
  // includes the lock file's device and inode).
  assert.match(busy.stderr, new RegExp(`held by pid ${node.pid} on host [0-9a-f]{16} \\(record lease, fencing token ${token(1)}\\)`))
  node.send('verify')
  assert.equal(await node.line(), 'ok')
  node.send('release')
  assert.equal(await node.line(), 'R')
  const after = runOnce(lockB, '--no-wait')
  assert.deepEqual([after.status, after.stdout], [0, `ran ${token(2)}\n`], after.stderr)

  // A CLI holder through B: Node through A cannot have it (null), and a waiting acquire gets
  // it, with the next token, once the holder is done.
  const cli = cliHolder(lockB)
  later(() => cli.kill())
  assert.equal(await cli.line(), `locked ${token(3)}`)
  assert.equal(Lease.tryAcquire(lockA, record(60000)), null)
  const waiting = Lease.acquire(lockA, { ...record(60000), timeoutMs: 30000 })
  cli.send('go')
  assert.equal(await cli.line(), 'done')
  assert.equal((await cli.exited).code, 0)
  const lease = await waiting
  assert.equal(lease.fencingToken, token(4))
  assert.equal(lease.shared, false)
  lease.verify()
  lease.release()
  assert.throws(() => lease.verify(), (e) => e.code === 'LOST')
  // Synchronous acquisition through B, then the CLI through A sees it taken.
  const sync = Lease.tryAcquire(lockB, record(60000))
  assert.equal(sync.fencingToken, token(5))
  const refused = runOnce(lockA, '--no-wait')
  assert.equal(refused.status, 75, refused.stderr)
  sync.release()
})

test('onSharedMount: after SIGKILL of a Node holder a successor on this host takes over at once, not after the TTL', async (t) => {
  const later = undoer(t)
  const mounts = twoMounts(t, later)
  if (mounts === null) return
  const [lockA, lockB] = [join(mounts[0], 'job.lock'), join(mounts[1], 'job.lock')]
  // A TTL far beyond the successor's timeout: only the same-host takeover can grant it (through
  // the same mount: through the other, another host to the protocol, it waits for the TTL).
  const node = nodeChild('record', lockA, '600000')
  later(() => node.kill())
  assert.equal(await node.line(), `H ${token(1)}`)
  assert.equal(Lease.tryAcquire(lockB, record(600000)), null)
  await node.kill('SIGKILL')
  const next = await Lease.acquire(lockA, { ...record(600000), timeoutMs: 30000 })
  // Adopted from the pass record the holder's renewing thread wrote after its grant (the next
  // local count), or taken over under rule (a) if it died before that write.
  assert.ok([token(1) + 1, token(2)].includes(next.fencingToken), `${next.fencingToken}`)
  const server = Math.floor(next.fencingToken / token(1))
  next.verify()
  next.release()
  const cli = runOnce(lockA, '--no-wait')
  assert.deepEqual([cli.status, cli.stdout], [0, `ran ${token(server + 1)}\n`], cli.stderr)
})

/** The record lease's fencing token of the server's grant `t` (no hand-over on one host since). */
function token (t) {
  return t * 2 ** 20
}

/** Whether this process can take the kernel's lock on `lock` right now (then lets it go). */
function kernelFree (lock) {
  const got = Lease.tryAcquire(lock, { allowNetworkFs: true })
  if (got === null) return false
  got.release()
  return true
}

test('onSharedMount: an abort, or the end of its worker, ends a record wait across hosts with nothing held', async (t) => {
  const later = undoer(t)
  const mounts = twoMounts(t, later)
  if (mounts === null) return
  const [lockA, lockB] = [join(mounts[0], 'job.lock'), join(mounts[1], 'job.lock')]
  const cli = cliHolder(lockB)
  later(() => cli.kill())
  assert.equal(await cli.line(), `locked ${token(1)}`)

  // A wait through A holds this host's queue (the kernel's lock on the lock path) while it
  // polls the record; an abort ends it (bounded: a wait that never ends fails the test).
  const ac = new AbortController()
  const waiting = Lease.acquire(lockA, { ...record(60000), signal: ac.signal })
  await until('the record wait holds this host\'s queue', () => !kernelFree(lockA))
  ac.abort()
  const ended = await within(10000, waiting)
  assert.equal(ended.code, 'CANCELLED', String(ended))
  assert.ok(kernelFree(lockA), 'nothing of the wait is held')

  // The same wait in a worker_thread, without a signal: terminating the worker ends it.
  const w = new Worker(`
    const { parentPort, workerData } = require('node:worker_threads')
    const { Lease } = require(workerData.pkg)
    Lease.acquire(workerData.lock, { onSharedMount: { record: { ttlMs: 60000 } } })
      .then(() => parentPort.postMessage('acquired'), (e) => parentPort.postMessage('failed ' + e.code))
    parentPort.postMessage('waiting')
  `, { eval: true, workerData: { pkg: PKG, lock: lockA } })
  const said = await new Promise((resolve) => w.once('message', resolve))
  assert.equal(said, 'waiting')
  await until('the worker\'s record wait holds this host\'s queue', () => !kernelFree(lockA))
  await w.terminate()
  await until('the terminated worker\'s wait has ended', () => kernelFree(lockA))
  cli.send('go')
  assert.equal(await cli.line(), 'done')
})

test('onSharedMount on the stores: without it a Document, the Registry, a SessionLog and a ResultStore on a host-only mount are refused naming it; with it they work', async (t) => {
  const later = undoer(t)
  const mounts = twoMounts(t, later)
  if (mounts === null) return
  const [a, b] = mounts
  const refused = (e) => e.code === 'NETWORK_FS' && RECORD_NAMED.test(e.message) && !/LeaseOptions|SharedMount::/.test(e.message)
  const bump = (d) => ({ n: ((d && d.n) || 0) + 1 })
  await assert.rejects(Document.open(join(a, 'doc.json')).update(bump, { timeoutMs: 1000 }), refused)
  await assert.rejects(Document.open(join(a, 'doc.json'), { onSharedMount: 'refuse' }).update(bump, { timeoutMs: 0 }), refused)
  assert.ok(!existsSync(join(a, 'doc.json')), 'a refused update wrote nothing')
  await assert.rejects(Registry.open({ home: join(a, 'home') }), refused)
  await assert.rejects(SessionLog.open(join(a, 'sessions'), 's1').append({ i: 1 }), refused)
  const src = join(tempDir(t), 'src')
  mkdirSync(src)
  writeFileSync(join(src, 'out.txt'), 'made\n')
  await assert.rejects(ResultStore.open(join(a, 'results')).stage('r1', src), refused)
  assert.ok(!existsSync(join(a, 'results', 'results', 'r1')), 'a refused stage staged nothing')
  for (const bad of [{ record: { ttlMs: -1 } }, { record: { ttlMs: NaN } }, { record: { ttlMs: 0 } }]) {
    assert.throws(() => Document.open(join(a, 'doc.json'), { onSharedMount: bad }), (e) => e.code === 'INVALID_INPUT' && e.message.includes('onSharedMount.record.ttlMs'), JSON.stringify(bad))
    await assert.rejects(Registry.open({ home: join(a, 'home'), onSharedMount: bad }), (e) => e.code === 'INVALID_INPUT' && e.message.includes('onSharedMount.record.ttlMs'))
    assert.throws(() => SessionLog.open(join(a, 'sessions'), 's1', { onSharedMount: bad }), (e) => e.code === 'INVALID_INPUT' && e.message.includes('onSharedMount.record.ttlMs'))
  }
  for (const bad of ['record', { record: 10 }, null]) {
    assert.throws(() => Document.open(join(a, 'doc.json'), { onSharedMount: bad }), (e) => e.code === 'INVALID_INPUT' && e.message.includes('onSharedMount'), JSON.stringify(bad))
  }

  // With the option: a record lease, its token kept in the fence beside the lock file.
  const doc = Document.open(join(a, 'doc.json'), record(60000))
  await doc.update(bump, { timeoutMs: 30000 })
  assert.deepEqual(Document.open(join(b, 'doc.json')).read().value, { n: 1 })
  assert.equal(readFileSync(join(b, 'doc.json.lock.fence'), 'utf8').trim(), String(token(1)))
  const home = join(a, 'home')
  const reg = await Registry.open({ home, ...record(60000) })
  assert.equal(reg.state, 'active')
  const [primary, root] = [join(a, 'primary'), join(a, 'root')]
  mkdirSync(primary)
  mkdirSync(root)
  await reg.add(primary, root)
  assert.deepEqual(reg.scope(), { [primary]: [root] })
  await reg.close()
  const log = SessionLog.open(join(a, 'sessions'), 's1', record(60000))
  await log.append({ i: 1 })
  log.close()
  assert.deepEqual(SessionLog.read(join(b, 'sessions'), 's1'), [{ i: 1 }])
  // The result store: each ID's operation under that ID's record lease, across the mounts.
  await ResultStore.open(join(a, 'results'), record(60000)).stage('r1', src)
  const throughB = ResultStore.open(join(b, 'results'), record(60000))
  assert.deepEqual(await throughB.paths('r1'), ['out.txt'])
  await throughB.discard('r1')
  assert.ok(!existsSync(join(a, 'results', 'results', 'r1')), 'discarded through the other mount')
})

/** Python's increment through the record lease: `python -c PY_INCREMENT PATH N TTL`. */
const PY_INCREMENT = `
import sys
from leasehold_lock import Document, Record
path, n, ttl = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
doc = Document(path, on_shared_mount=Record(ttl=ttl))
print("ready", flush=True)
sys.stdin.readline()
def bump(d):
    d = d or {}
    d["n"] = d.get("n", 0) + 1
    return d
for _ in range(n):
    doc.update(bump, timeout=60)
print("done", flush=True)
`

test('onSharedMount on Document: Node updates through one mount and Python updates through the other, N each at once, end at exactly 2N', async (t) => {
  if (!process.env.LEASEHOLD_PYTHONPATH) return skip(t, 'cross-language record test', `no Python package to run (${process.env.LEASEHOLD_NO_PYTHON ?? 'LEASEHOLD_PYTHONPATH is not set'})`)
  const later = undoer(t)
  const mounts = twoMounts(t, later)
  if (mounts === null) return
  const N = 100
  const [docA, docB] = [join(mounts[0], 'counter.json'), join(mounts[1], 'counter.json')]
  writeFileSync(docA, '{"n": 0}\n')
  const node = new Child(process.execPath, [join(__dirname, 'doc-child.js'), 'increment', docA, String(N), '60000'], {
    env: { ...process.env, LEASEHOLD_NODE: PKG }
  })
  later(() => node.kill())
  const python = new Child(process.env.LEASEHOLD_PYTHON ?? 'python3', ['-c', PY_INCREMENT, docB, String(N), '60'], {
    env: { ...process.env, PYTHONPATH: process.env.LEASEHOLD_PYTHONPATH, PYTHONDONTWRITEBYTECODE: '1' }
  })
  later(() => python.kill())
  assert.equal(await node.line(), 'ready')
  assert.equal(await python.line(), 'ready')
  node.send('go')
  python.send('go')
  assert.equal(await node.line(), 'done')
  assert.equal(await python.line(), 'done')
  assert.equal((await node.exited).code, 0)
  assert.equal((await python.finish()).code, 0)
  assert.deepEqual(JSON.parse(readFileSync(docB, 'utf8')), { n: 2 * N })
  // Every update took a grant of its own (each process alone on its mount: no hand-over on one
  // host): the fence holds the last of 2N tokens.
  assert.equal(readFileSync(join(mounts[0], 'counter.json.lock.fence'), 'utf8').trim(), String(token(2 * N)))
})
