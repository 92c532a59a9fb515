'use strict'
// Errors in this package's words: one LeaseholdError class with a stable code, an aborted
// wait rejecting with its signal's reason, and messages that name this package's options
// (never a Rust API or a CLI contract's code prefix) and say what to do next.
const test = require('node:test')
const assert = require('node:assert/strict')
const { join } = require('node:path')
const fs = require('node:fs')
const { execFileSync } = require('node:child_process')
const { lh, tempDir, nodeChild, skip, Child } = require('./helpers')
const { Lease, LeaseholdError, Document, ResultStore, SessionLog, Registry } = lh

/** No Rust API names and no CLI code prefixes in a message of this package. */
function inNodeTerms (message) {
  return !/LeaseOptions|Budget|::|^[a-z]+(-[a-z]+)+: /.test(message)
}

test('every failure is a LeaseholdError with its code, and instanceof tells it apart', async (t) => {
  assert.equal(typeof LeaseholdError, 'function')
  const dir = tempDir(t)
  const e = await Lease.acquire(join(dir, 'x.lock'), { timeoutMs: -1 }).catch((e) => e)
  assert.ok(e instanceof LeaseholdError && e instanceof Error, String(e))
  assert.equal(e.code, 'INVALID_INPUT')
  assert.equal(e.name, 'LeaseholdError')
  assert.ok(e.stack.startsWith('LeaseholdError: '), e.stack)
  const made = new LeaseholdError('m', 'IO', [1])
  assert.deepEqual([made.message, made.code, made.pids], ['m', 'IO', [1]])
  assert.ok(!(new Error('x') instanceof LeaseholdError))
})

test('a wait held up at a gate is worded as the library words it, with the advice in timeoutMs', { skip: process.platform !== 'linux' && 'needs util-linux flock(1) and /proc/locks' }, async (t) => {
  const dir = tempDir(t)
  const lock = join(dir, 'g.lock')
  // The gates exist once a shared lease was taken; one is then held by a process that does
  // not let it go (in life a waiter stopped or stuck), the lock itself free.
  ;(await Lease.acquire(lock, { shared: true })).release()
  const gate = join(dir, '.g.lock.leasehold-gate')
  const blocker = new Child('flock', [gate, 'sh', '-c', 'echo H; read x'])
  t.after(() => blocker.finish())
  await blocker.expect('H')
  const e = await Lease.acquire(lock, { shared: true, timeoutMs: 0 }).catch((e) => e)
  assert.equal(e.code, 'CONTENDED', String(e))
  assert.ok(e.message.startsWith(`${lock}: lock is held up at its gate ${gate}, held by another process`), e.message)
  assert.ok(e.message.includes('the lock itself is free, so that waiter is stopped or stuck: resume or end it); not waited for (pass a timeoutMs'), e.message)
  assert.ok(inNodeTerms(e.message), e.message)
})

test('an empty path, or one with a NUL byte, is INVALID_INPUT (holders too) and creates nothing', async (t) => {
  const dir = tempDir(t)
  const cwd = process.cwd()
  process.chdir(dir)
  t.after(() => process.chdir(cwd))
  for (const path of ['', 'a\0b.lock']) {
    for (const attempt of [() => Lease.acquire(path), () => Lease.acquire(path, { shared: true, timeoutMs: 0 })]) {
      const e = await attempt().catch((e) => e)
      assert.ok(e instanceof LeaseholdError, String(e))
      assert.equal(e.code, 'INVALID_INPUT', e.message)
      assert.ok(e.message.includes('not a usable path') && e.message.includes('give the path of the lock file'), e.message)
    }
    assert.throws(() => Lease.tryAcquire(path), { code: 'INVALID_INPUT' })
    assert.throws(() => lh.holders(path), { code: 'INVALID_INPUT' })
  }
  assert.deepEqual(fs.readdirSync(dir), [])
})

test("an aborted wait rejects with the signal's reason, code CANCELLED; nothing is held after", async (t) => {
  const lock = join(tempDir(t), 'abort.lock')
  const holder = nodeChild('hold', lock)
  t.after(() => holder.kill())
  await holder.expect('H')
  // An AbortController's abort(): the AbortError DOMException itself.
  const ac = new AbortController()
  const waiting = Lease.acquire(lock, { signal: ac.signal }).catch((e) => e)
  ac.abort()
  const e = await waiting
  assert.equal(e, ac.signal.reason)
  assert.equal(e.name, 'AbortError')
  assert.equal(e.code, 'CANCELLED')
  // AbortSignal.timeout: its TimeoutError (the wait is under way when it fires).
  const timeout = AbortSignal.timeout(50)
  const timedOut = await Lease.acquire(lock, { signal: timeout }).catch((e) => e)
  assert.equal(timedOut, timeout.reason)
  assert.equal(timedOut.name, 'TimeoutError')
  assert.equal(timedOut.code, 'CANCELLED')
  // Aborted before the call: the same, for a free lock too.
  const already = AbortSignal.abort()
  const before = await Lease.acquire(join(tempDir(t), 'free.lock'), { signal: already }).catch((e) => e)
  assert.equal(before, already.reason)
  assert.equal(before.code, 'CANCELLED')
  // A reason that is no object: a LeaseholdError CANCELLED whose cause is the reason.
  const stop = new AbortController()
  const stopped = Lease.acquire(lock, { signal: stop.signal }).catch((e) => e)
  stop.abort('shutting down')
  const s = await stopped
  assert.ok(s instanceof LeaseholdError, String(s))
  assert.equal(s.code, 'CANCELLED')
  assert.equal(s.cause, 'shutting down')
  assert.ok(s.message.includes(lock), s.message)
  // The stores' waits too.
  const doc = Document.open(join(tempDir(t), 'd.json'))
  const reason = new Error('user gave up')
  const docAbort = new AbortController()
  docAbort.abort(reason)
  const d = await doc.update(() => ({ n: 1 }), { signal: docAbort.signal }).catch((e) => e)
  assert.equal(d, reason)
  assert.equal(d.code, 'CANCELLED')
  assert.equal(doc.read(), null, 'nothing was written')
  const home = tempDir(t)
  const authority = await Registry.open({ home })
  assert.equal(authority.state, 'active')
  const r = await Registry.open({ home, timeoutMs: 10000, signal: AbortSignal.abort() }).catch((e) => e)
  assert.equal(r.name, 'AbortError', String(r))
  assert.equal(r.code, 'CANCELLED')
  await authority.close()
  holder.send('release')
})

test('a refusal names the option as this package spells it (allowSharedState, allowNetworkFs)', async (t) => {
  const dir = tempDir(t)
  const lock = join(dir, 'shared.lock')
  fs.writeFileSync(lock, '')
  fs.chmodSync(lock, 0o666)
  const e = await Lease.acquire(lock, { timeoutMs: 0 }).catch((e) => e)
  assert.equal(e.code, 'UNTRUSTED', e.message)
  assert.ok(e.message.startsWith(`${lock}: `), e.message)
  assert.ok(e.message.includes('opt in with the option allowSharedState: true'), e.message)
  assert.ok(inNodeTerms(e.message) && !e.message.includes('LEASEHOLD_ALLOW_SHARED'), e.message)
  ;(await Lease.acquire(lock, { allowSharedState: true })).release()

  // A FUSE mount (bindfs) is refused as a network file system.
  const backing = join(dir, 'backing')
  const mnt = join(dir, 'mnt')
  fs.mkdirSync(backing)
  fs.mkdirSync(mnt)
  try {
    execFileSync('bindfs', [backing, mnt], { stdio: 'ignore' })
  } catch (err) {
    return skip(t, 'NETWORK_FS message', `bindfs cannot mount here (${err.code ?? err.status})`)
  }
  // Unmounted before the directory is removed (the test's own cleanup comes after).
  try {
    const onFuse = join(mnt, 'app.lock')
    const n = await Lease.acquire(onFuse, { timeoutMs: 0 }).catch((e) => e)
    assert.equal(n.code, 'NETWORK_FS', n.message)
    assert.ok(n.message.includes('opt in with the option allowNetworkFs: true'), n.message)
    assert.ok(inNodeTerms(n.message) && !n.message.includes('LEASEHOLD_ALLOW_NETWORK_FS'), n.message)
    ;(await Lease.acquire(onFuse, { allowNetworkFs: true })).release()
  } finally {
    try { execFileSync('fusermount3', ['-u', mnt], { stdio: 'ignore' }) } catch { execFileSync('fusermount', ['-u', mnt], { stdio: 'ignore' }) }
  }
})

test('store errors: no CLI code prefixes, NOT_FOUND for an ID that names nothing, advice on contention', async (t) => {
  // A registry root that is not a directory: INVALID_INPUT, worded without `invalid-root:`.
  const home = tempDir(t)
  const reg = await Registry.open({ home })
  const missing = join(home, 'missing')
  const bad = await reg.add(home, missing).catch((e) => e)
  assert.equal(bad.code, 'INVALID_INPUT')
  assert.ok(bad.message.startsWith(`${missing}: `) && bad.message.includes('pass the path of an existing directory'), bad.message)
  assert.ok(inNodeTerms(bad.message), bad.message)
  // Another authority: what to do next (refresh, or wait with timeoutMs).
  const second = await Registry.open({ home })
  assert.equal(second.state, 'contended')
  const held = await second.add(home, home).catch((e) => e)
  assert.equal(held.code, 'NOT_AUTHORITY')
  assert.ok(held.message.startsWith('registry is held by this process') && held.message.includes('refresh() takes over then') && held.message.includes('timeoutMs'), held.message)
  await second.close()
  await reg.close()

  // A result that does not exist: NOT_FOUND, not INVALID_INPUT, worded without `unknown-result:`.
  const store = ResultStore.open(join(tempDir(t), 'results'), { timeoutMs: 0 })
  const unknown = await store.paths('never-staged').catch((e) => e)
  assert.equal(unknown.code, 'NOT_FOUND')
  assert.ok(unknown.message.startsWith('no result "never-staged" in ') && unknown.message.includes('stage it first'), unknown.message)
  assert.ok(inNodeTerms(unknown.message), unknown.message)
  const src = tempDir(t)
  fs.writeFileSync(join(src, 'a'), 'A')
  await store.stage('r1', src)
  const exists = await store.stage('r1', src).catch((e) => e)
  assert.equal(exists.code, 'INVALID_INPUT')
  assert.ok(exists.message.startsWith('result "r1" already exists in ') && inNodeTerms(exists.message), exists.message)

  // A session that does not exist, one another writer owns, and a record with no JSON text.
  const dir = tempDir(t)
  const nobody = (() => { try { SessionLog.read(dir, 'nobody') } catch (e) { return e } })()
  assert.equal(nobody.code, 'NOT_FOUND')
  assert.ok(nobody.message.startsWith('there is no session nobody in ') && inNodeTerms(nobody.message), nobody.message)
  const writer = nodeChild('session', dir, 's1')
  assert.equal(await writer.line(), 'open')
  writer.send('append {"n":1}')
  assert.equal(await writer.line(), 'ok')
  const log = SessionLog.open(dir, 's1')
  const owned = await log.append({ n: 2 }).catch((e) => e)
  assert.equal(owned.code, 'SESSION_OWNED')
  assert.ok(owned.message.startsWith('session s1 is owned by another process') && owned.message.includes('append under another ID'), owned.message)
  writer.send('close')
  assert.equal(await writer.line(), 'closed')
  for (const record of [undefined, () => 1, Symbol('s')]) {
    const e = await log.append(record).catch((e) => e)
    assert.equal(e.code, 'INVALID_INPUT')
    assert.ok(e.message.includes('has no JSON text') && !e.message.includes('EOF'), e.message)
  }
  log.close()
  await writer.finish()
})

test("every store's refusal of shared state names allowSharedState, and each store's open takes it", async (t) => {
  // What each refusal names exists on the call that refused: a user who follows the advice
  // gets in. A lock file others may write, for the registry; a store directory others may
  // write (not sticky), for the session log and the result store.
  const home = tempDir(t)
  fs.mkdirSync(join(home, 'storages'), { mode: 0o700 })
  const lock = join(home, 'storages', 'multi_root_workspace.lock')
  fs.writeFileSync(lock, '')
  fs.chmodSync(lock, 0o666)
  const refused = await Registry.open({ home }).catch((e) => e)
  assert.equal(refused.code, 'UNTRUSTED', refused.message)
  assert.ok(refused.message.includes('allowSharedState: true') && inNodeTerms(refused.message), refused.message)
  const reg = await Registry.open({ home, allowSharedState: true })
  assert.equal(reg.state, 'active')
  await reg.close()

  const open = tempDir(t)
  fs.chmodSync(open, 0o777)
  const sessions = join(open, 'sessions')
  fs.mkdirSync(sessions, { mode: 0o777 })
  fs.chmodSync(sessions, 0o777)
  const log = SessionLog.open(sessions, 's1')
  const untrusted = await log.append({ n: 1 }).catch((e) => e)
  assert.equal(untrusted.code, 'UNTRUSTED', untrusted.message)
  assert.ok(untrusted.message.includes('allowSharedState: true') && inNodeTerms(untrusted.message), untrusted.message)
  log.close()
  const shared = SessionLog.open(sessions, 's1', { allowSharedState: true })
  await shared.append({ n: 1 })
  shared.close()
  assert.deepEqual(SessionLog.read(sessions, 's1', { allowSharedState: true }), [{ n: 1 }])

  const root = join(open, 'results')
  fs.mkdirSync(root, { mode: 0o777 })
  fs.chmodSync(root, 0o777)
  const src = tempDir(t)
  fs.writeFileSync(join(src, 'a'), 'A')
  const store = ResultStore.open(root, { timeoutMs: 0 })
  const denied = await store.stage('r1', src).catch((e) => e)
  assert.equal(denied.code, 'UNTRUSTED', denied.message)
  assert.ok(denied.message.includes('allowSharedState: true') && inNodeTerms(denied.message), denied.message)
  await ResultStore.open(root, { timeoutMs: 0, allowSharedState: true }).stage('r1', src)
})
