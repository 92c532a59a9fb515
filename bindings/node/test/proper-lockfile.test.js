'use strict'
// leasehold-lock/proper-lockfile against proper-lockfile 4.1.2's README, behaviour by behaviour
// (lock, unlock, check, their Sync forms and every option), the deliberate differences the
// package README lists, atomic rewrites of the locked file, and the real proper-lockfile side
// by side (installed from npm when the test runs). Real processes, synchronised by their lines
// and by /proc/locks; SIGSTOP where a pause is meant, SIGKILL where a crash is.
const test = require('node:test')
const assert = require('node:assert/strict')
const { join } = require('node:path')
const fs = require('node:fs')
const { execFileSync, spawn } = require('node:child_process')
const { PKG, skip, tempDir, Child, blockedOn, until, within } = require('./helpers')

const lockfile = require(join(PKG, 'proper-lockfile.js'))
const { holders } = require(PKG)

/** A process running test/plf-child.js (see there); LIB is 'ours' or the real package's path. */
function plfChild (role, lib, file, ...rest) {
  return new Child(process.execPath, [join(__dirname, 'plf-child.js'), role, lib, file, ...rest], {
    env: { ...process.env, LEASEHOLD_NODE: PKG }
  })
}

/** A file to lock, with content, in a fresh directory. */
function dataFile (t, name = 'data.json', content = '0') {
  const file = join(fs.realpathSync(tempDir(t)), name)
  fs.writeFileSync(file, content)
  return file
}

/** `promise`'s rejection (fails the test if it resolves). */
async function rejection (promise) {
  try {
    await promise
  } catch (e) {
    return e
  }
  assert.fail('resolved where a rejection was expected')
}

function thrown (fn) {
  try {
    fn()
  } catch (e) {
    return e
  }
  assert.fail('returned where a throw was expected')
}

let realPath
/**
 * The directory of the real proper-lockfile 4.1.2: the devDependency `npm ci` installed, else
 * `npm install` into a temporary directory now; null (and a SKIP) where npm cannot get it.
 */
function realProperLockfile (t, what) {
  if (realPath !== undefined) {
    if (realPath === null) skip(t, what, 'proper-lockfile 4.1.2 could not be installed from npm (see the first SKIP)')
    return realPath
  }
  const dev = join(__dirname, '..', 'node_modules', 'proper-lockfile')
  try {
    if (JSON.parse(fs.readFileSync(join(dev, 'package.json'), 'utf8')).version === '4.1.2') return (realPath = dev)
  } catch {}
  const dir = fs.mkdtempSync(join(require('node:os').tmpdir(), 'leasehold-plf-'))
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }))
  try {
    execFileSync(process.platform === 'win32' ? 'npm.cmd' : 'npm', ['install', '--no-save', '--no-audit', '--no-fund', '--fetch-retries=1', '--prefix', dir, 'proper-lockfile@4.1.2'], { stdio: 'pipe', timeout: 300000 })
    return (realPath = join(dir, 'node_modules', 'proper-lockfile'))
  } catch (e) {
    realPath = null
    const why = String(e.stderr || e.message).split('\n').filter((l) => l.startsWith('npm error') && !l.includes('complete log')).slice(0, 2).join('; ')
    skip(t, what, `npm install proper-lockfile@4.1.2 failed (is the npm registry reachable?): ${why || e.message}`)
    return null
  }
}

// --- lock(file, options) -----------------------------------------------------------------

test('lock resolves a release function; the lease is on the sibling FILE.lock, never on the file', async (t) => {
  const file = dataFile(t)
  const release = await lockfile.lock(file, { stale: 10000, update: 5000, fs: require('node:fs') })
  assert.equal(typeof release, 'function')
  assert.deepEqual(holders(`${file}.lock`), { state: 'held', pids: [process.pid] })
  assert.deepEqual(holders(file), { state: 'free' }, 'the data file itself carries no lock')
  assert.equal(fs.readFileSync(file, 'utf8'), '0', 'the data file is untouched')
  const other = plfChild('hold', 'ours', file)
  assert.match(await other.line(), /^E ELOCKED /)
  const released = release()
  assert.ok(released instanceof Promise, 'release returns a promise')
  assert.equal(await released, undefined)
  assert.deepEqual(holders(`${file}.lock`), { state: 'free' })
  await other.finish()
})

test('the module itself is lock(), as proper-lockfile\'s is', async (t) => {
  const file = dataFile(t)
  assert.equal(typeof lockfile, 'function')
  const release = await lockfile(file)
  assert.equal(await lockfile.check(file), true)
  await release()
})

test('lock of a file another process holds rejects ELOCKED at once without retries', async (t) => {
  const file = dataFile(t)
  const holder = plfChild('hold', 'ours', file)
  await holder.expect('H')
  const e = await rejection(lockfile.lock(file))
  assert.equal(e.code, 'ELOCKED')
  assert.equal(e.file, file)
  assert.deepEqual(e.pids, [holder.pid])
  assert.ok(e.message.includes(`${file}.lock`) && e.message.includes(`pid ${holder.pid}`), e.message)
  assert.match(e.message, /retries/, 'the message says how to wait')
  await holder.finish()
})

test('retries (a number): lock waits in the kernel, and gets the lock when the holder releases', async (t) => {
  const file = dataFile(t)
  const holder = plfChild('hold', 'ours', file)
  await holder.expect('H')
  const waiting = lockfile.lock(file, { retries: 10 })
  await until('this process waits in the kernel (no polling)', () => blockedOn(process.pid, `${file}.lock`))
  holder.send('release')
  await holder.expect('R')
  const release = await waiting
  assert.deepEqual(holders(`${file}.lock`), { state: 'held', pids: [process.pid] })
  await release()
  await holder.finish()
})

test('retries (retry options): the wait ends ELOCKED once the budget those retries allow is spent', async (t) => {
  const file = dataFile(t)
  const holder = plfChild('hold', 'ours', file)
  await holder.expect('H')
  const waiting = rejection(lockfile.lock(file, { retries: { retries: 3, factor: 1, minTimeout: 500 } }))
  await until('this process waits in the kernel', () => blockedOn(process.pid, `${file}.lock`))
  const e = await waiting
  assert.equal(e.code, 'ELOCKED')
  assert.match(e.message, /waited 1500 ms/)
  await holder.finish()
})

test('retries: the wait budget is what the retry package\'s delays add up to', () => {
  const budget = lockfile.retryBudgetMs
  assert.equal(budget(undefined), 0)
  assert.equal(budget(0), 0)
  assert.equal(budget(3), 1000 + 2000 + 4000)
  assert.equal(budget({}), 1023000, 'the retry package\'s defaults: 10 retries from 1 s, doubling')
  assert.equal(budget({ retries: 4, factor: 3, minTimeout: 10 }), 10 + 30 + 90 + 270)
  assert.equal(budget({ retries: 4, minTimeout: 100, maxTimeout: 250 }), 100 + 200 + 250 + 250)
  assert.equal(budget({ retries: 2, minTimeout: 100, randomize: true }), 200 + 400, 'randomized delays at their upper bound')
  assert.equal(budget({ retries: 10, maxRetryTime: 2500 }), 1000 + 2000, 'no retry after maxRetryTime')
  assert.equal(budget([50, 10, 20]), 80)
  assert.equal(budget({ forever: true }), Infinity)
  assert.equal(budget(Infinity), Infinity)
  assert.equal(thrown(() => budget({ minTimeout: 10, maxTimeout: 5 })).code, 'INVALID_INPUT')
  assert.equal(thrown(() => budget('3')).code, 'INVALID_INPUT')
})

test('stale: a live holder paused for longer than stale keeps the lock (no takeover)', async (t) => {
  const file = dataFile(t)
  const holder = plfChild('hold', 'ours', file)
  await holder.expect('H')
  holder.proc.kill('SIGSTOP')
  t.after(() => holder.proc.kill('SIGCONT'))
  // proper-lockfile would take the lock over once the holder's mtime is 2 s old; the wait
  // here lasts past that, and ends ELOCKED.
  const e = await rejection(lockfile.lock(file, { stale: 2000, retries: { retries: 1, minTimeout: 2500 } }))
  assert.equal(e.code, 'ELOCKED')
  assert.deepEqual(e.pids, [holder.pid])
  holder.proc.kill('SIGCONT')
  holder.send('release')
  await holder.expect('R')
  await (await lockfile.lock(file))()
  await holder.finish()
})

test('realpath (default true): the file must exist; a symlink and its target are one lock', async (t) => {
  const file = dataFile(t)
  const link = join(file, '..', 'link.json')
  fs.symlinkSync(file, link)
  const release = await lockfile.lock(link)
  assert.deepEqual(holders(`${file}.lock`), { state: 'held', pids: [process.pid] }, 'the target\'s lock')
  assert.equal(fs.existsSync(`${link}.lock`), false)
  assert.equal(await lockfile.check(file), true)
  assert.equal((await rejection(lockfile.lock(file))).code, 'ELOCKED')
  await lockfile.unlock(link)
  const missing = join(file, '..', 'missing.json')
  assert.equal((await rejection(lockfile.lock(missing))).code, 'ENOENT')
  assert.equal((await rejection(lockfile.check(missing))).code, 'ENOENT')
  assert.equal((await rejection(lockfile.unlock(missing))).code, 'ENOENT')
  assert.equal(thrown(() => lockfile.lockSync(missing)).code, 'ENOENT')
  await release().catch((e) => assert.equal(e.code, 'ERELEASED', 'unlock(link) released it'))
})

test('realpath: false: the file need not exist, and a symlink is locked as its own path', async (t) => {
  const file = dataFile(t)
  const link = join(file, '..', 'link.json')
  fs.symlinkSync(file, link)
  const missing = join(file, '..', 'missing.json')
  const r1 = await lockfile.lock(missing, { realpath: false })
  assert.equal(fs.existsSync(missing), false, 'the file is not created')
  assert.deepEqual(holders(`${missing}.lock`), { state: 'held', pids: [process.pid] })
  const r2 = await lockfile.lock(link, { realpath: false })
  assert.deepEqual(holders(`${link}.lock`), { state: 'held', pids: [process.pid] })
  assert.equal(await lockfile.check(file), false, 'the target is not locked')
  await lockfile.unlock(link, { realpath: false })
  await r1()
  assert.equal((await rejection(r2())).code, 'ERELEASED')
  // A deliberate difference: the lock file's missing directories are created, as for every lease.
  const deep = join(file, '..', 'new', 'dir', 'data.json')
  await (await lockfile.lock(deep, { realpath: false }))()
  assert.ok(fs.statSync(`${deep}.lock`).isFile())
})

test('lockfilePath: the lease is at that path (a directory locked by a file inside it)', async (t) => {
  const dir = tempDir(t)
  const lockfilePath = join(dir, 'dir.lock')
  const release = await lockfile.lock(dir, { lockfilePath })
  assert.deepEqual(holders(lockfilePath), { state: 'held', pids: [process.pid] })
  assert.equal(await lockfile.check(dir, { lockfilePath }), true)
  assert.equal(await lockfile.check(dir), false, 'the default lock path is another lock')
  const holder = plfChild('hold', 'ours', dir, JSON.stringify({ lockfilePath }))
  assert.match(await holder.line(), /^E ELOCKED /)
  await holder.finish()
  await lockfile.unlock(dir, { lockfilePath })
  assert.deepEqual(holders(lockfilePath), { state: 'free' })
  assert.equal((await rejection(release())).code, 'ERELEASED')
})

test('onCompromised is called with ECOMPROMISED when verify() finds the lock file removed', async (t) => {
  const file = dataFile(t)
  let compromised
  const seen = new Promise((resolve) => { compromised = resolve })
  const release = await lockfile.lock(file, { update: 1000, onCompromised: compromised })
  fs.unlinkSync(`${file}.lock`)
  // The verification timer does not keep the process alive (nor did proper-lockfile's): this does.
  const alive = setInterval(() => {}, 1000)
  const e = await within(20000, seen)
  clearInterval(alive)
  assert.notEqual(e, 'timed out', 'onCompromised was called')
  assert.equal(e.code, 'ECOMPROMISED')
  assert.ok(e.message.includes(`${file}.lock`), e.message)
  assert.equal((await rejection(release())).code, 'ERELEASED', 'a compromised lock is released')
  assert.equal((await rejection(lockfile.unlock(file))).code, 'ENOTACQUIRED')
  await (await lockfile.lock(file))()
})

test('onCompromised by default throws asynchronously: the holder dies with ECOMPROMISED', async (t) => {
  const file = dataFile(t)
  const holder = new Child(process.execPath, [join(__dirname, 'plf-child.js'), 'compromised', 'ours', file], {
    env: { ...process.env, LEASEHOLD_NODE: PKG },
    stdio: ['pipe', 'pipe', 'pipe']
  })
  let stderr = ''
  holder.proc.stderr.on('data', (d) => { stderr += d })
  t.after(() => holder.proc.kill('SIGKILL'))
  await holder.expect('H')
  fs.unlinkSync(`${file}.lock`)
  const exited = await within(20000, holder.exited)
  assert.equal(exited.code, 1, `the uncaught error ends the process (${JSON.stringify(exited)})`)
  assert.match(stderr, /code: 'ECOMPROMISED'/)
  assert.ok(stderr.includes(`${file}.lock`), stderr)
})

test('a holder\'s exit, even by SIGKILL, frees the lock at once for the next lock()', async (t) => {
  const file = dataFile(t)
  const holder = plfChild('hold', 'ours', file)
  await holder.expect('H')
  await holder.kill('SIGKILL')
  const release = await lockfile.lock(file) // no retries: it is free at once
  await release()
})

// --- unlock(file, options) ---------------------------------------------------------------

test('unlock releases a lock taken with lock(); another process then gets it', async (t) => {
  const file = dataFile(t)
  const release = await lockfile.lock(file)
  assert.equal(await lockfile.unlock(file), undefined)
  const other = plfChild('hold', 'ours', file)
  await other.expect('H')
  assert.equal((await rejection(release())).code, 'ERELEASED')
  await other.finish()
})

test('unlock of a lock this process does not hold rejects ENOTACQUIRED, whoever holds it', async (t) => {
  const file = dataFile(t)
  const e = await rejection(lockfile.unlock(file))
  assert.equal(e.code, 'ENOTACQUIRED')
  assert.ok(e.message.includes(file), e.message)
  const holder = plfChild('hold', 'ours', file)
  await holder.expect('H')
  assert.equal((await rejection(lockfile.unlock(file))).code, 'ENOTACQUIRED')
  assert.equal(thrown(() => lockfile.unlockSync(file)).code, 'ENOTACQUIRED')
  assert.deepEqual(holders(`${file}.lock`), { state: 'held', pids: [holder.pid] }, 'the other holder keeps it')
  await holder.finish()
})

// --- check(file, options) ----------------------------------------------------------------

test('check: true while any process holds the lock, false otherwise; it creates nothing', async (t) => {
  const file = dataFile(t)
  assert.equal(await lockfile.check(file, { stale: 5000 }), false)
  assert.equal(fs.existsSync(`${file}.lock`), false, 'check creates no lock file')
  const holder = plfChild('hold', 'ours', file)
  await holder.expect('H')
  assert.equal(await lockfile.check(file), true)
  assert.equal(lockfile.checkSync(file), true)
  holder.send('release')
  await holder.expect('R')
  assert.equal(await lockfile.check(file), false)
  const release = await lockfile.lock(file)
  assert.equal(await lockfile.check(file), true, 'this process\'s own lock counts')
  await release()
  await holder.finish()
})

// --- the Sync forms ------------------------------------------------------------------------

test('lockSync returns a synchronous release, throws ELOCKED when held; retries throw ESYNC', async (t) => {
  const file = dataFile(t)
  const release = lockfile.lockSync(file)
  assert.equal(typeof release, 'function')
  assert.equal(lockfile.checkSync(file), true)
  assert.equal(thrown(() => lockfile.lockSync(file)).code, 'ELOCKED')
  assert.equal(release(), undefined)
  assert.equal(lockfile.checkSync(file), false)
  assert.equal(thrown(() => release()).code, 'ERELEASED')
  assert.equal(thrown(() => lockfile.lockSync(file, { retries: 1 })).code, 'ESYNC')
  assert.equal(thrown(() => lockfile.lockSync(file, { retries: { retries: 2 } })).code, 'ESYNC')
  const holder = plfChild('hold', 'ours', file)
  await holder.expect('H')
  const e = thrown(() => lockfile.lockSync(file))
  assert.equal(e.code, 'ELOCKED')
  assert.deepEqual(e.pids, [holder.pid])
  await holder.finish()
  lockfile.lockSync(file)
  assert.equal(lockfile.unlockSync(file), undefined)
  assert.equal(lockfile.checkSync(file), false)
})

// --- the locked file is a document: rewrite it atomically under the lock -------------------

test('four processes rewrite the locked file atomically (temporary + rename) 200 times: none lost', async (t) => {
  const file = dataFile(t, 'counter.json', '0')
  const options = JSON.stringify({ retries: { forever: true } })
  const counters = [0, 1, 2, 3].map(() => plfChild('count', 'ours', file, '50', options))
  const said = await Promise.all(counters.map((c) => c.line()))
  assert.deepEqual(said, ['done 50 0', 'done 50 0', 'done 50 0', 'done 50 0'])
  assert.equal(fs.readFileSync(file, 'utf8'), '200')
  await Promise.all(counters.map((c) => c.finish()))
})

// --- side by side with the real proper-lockfile --------------------------------------------

test('side by side: proper-lockfile\'s holder makes this face ELOCKED (its directory is its lock)', async (t) => {
  const real = realProperLockfile(t, 'proper-lockfile side by side')
  if (!real) return
  const file = dataFile(t)
  const theirs = plfChild('hold', real, file)
  await theirs.expect('H')
  assert.ok(fs.statSync(`${file}.lock`).isDirectory(), 'proper-lockfile holds by mkdir')
  const e = await rejection(lockfile.lock(file, { retries: 2 }))
  assert.equal(e.code, 'ELOCKED')
  assert.match(e.message, /proper-lockfile/)
  assert.equal(thrown(() => lockfile.lockSync(file)).code, 'ELOCKED')
  assert.equal(await lockfile.check(file), true)
  theirs.send('release')
  await theirs.expect('R')
  const release = await lockfile.lock(file)
  await release()
  await theirs.finish()
})

test('side by side: this face\'s holder keeps proper-lockfile out, fresh or stale, and it removes nothing', async (t) => {
  const real = realProperLockfile(t, 'proper-lockfile side by side')
  if (!real) return
  const file = dataFile(t)
  const ours = plfChild('hold', 'ours', file)
  await ours.expect('H')
  const theirs = plfChild('hold', real, file)
  assert.match(await theirs.line(), /^E ELOCKED /)
  await theirs.finish()
  // Lock files stay: one last used an hour ago looks stale to proper-lockfile, which tries to
  // take it over with rmdir, and fails.
  const hourAgo = new Date(Date.now() - 3600 * 1000)
  fs.utimesSync(`${file}.lock`, hourAgo, hourAgo)
  const stale = plfChild('hold', real, file)
  assert.match(await stale.line(), /^E ENOTDIR /)
  await stale.finish()
  assert.deepEqual(holders(`${file}.lock`), { state: 'held', pids: [ours.pid] }, 'still ours, the same file')
  await ours.finish()
})

test('side by side: two processes on proper-lockfile and two on this face, 50 increments each: never two holders', async (t) => {
  const real = realProperLockfile(t, 'proper-lockfile side by side')
  if (!real) return
  const file = dataFile(t, 'mixed.json', '0')
  const retries = JSON.stringify({ retries: { retries: 3, factor: 1, minTimeout: 5 } })
  const counters = [real, 'ours', real, 'ours'].map((lib) => plfChild('count', lib, file, '50', retries))
  const said = await Promise.all(counters.map((c) => c.line()))
  let ok = 0
  for (const line of said) {
    const m = /^done (\d+) (\d+)$/.exec(line)
    assert.ok(m, `a counter failed: ${line}`)
    ok += Number(m[1])
    assert.equal(Number(m[1]) + Number(m[2]), 50)
  }
  assert.equal(fs.readFileSync(file, 'utf8'), String(ok), 'every increment made under the lock is there')
  assert.ok(ok > 0)
  await Promise.all(counters.map((c) => c.finish()))
})

test('ESM: import { lock } from the subpath module', async (t) => {
  const file = dataFile(t)
  const url = require('node:url').pathToFileURL(join(PKG, 'proper-lockfile.js')).href
  const script = `import lockfile, { lock, checkSync } from ${JSON.stringify(url)}
const release = await lock(${JSON.stringify(file)})
if (!checkSync(${JSON.stringify(file)}) || lockfile.lock !== lock) process.exit(2)
await release()
console.log('ok')`
  const out = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
  let text = ''
  out.stdout.on('data', (d) => { text += d })
  const code = await new Promise((resolve) => out.on('exit', resolve))
  assert.equal(code, 0)
  assert.equal(text.trim(), 'ok')
})
