'use strict'
// The npm package `leasehold-lock`: the loader of the native addon (napi-rs's per-platform
// pattern: `leasehold.<platform>-<arch>[-<abi>].node` next to this file) and the thin
// JavaScript face over it. Every decision — opening, locking, verifying, waiting, the
// stores' rules — is the Rust library's; this file only adds what JavaScript must: the
// AbortSignal listener, Symbol.dispose, and errors thrown with their `code`.

const { existsSync } = require('node:fs')
const { join } = require('node:path')
const { addonNames, packageNames, platforms } = require('./platform')

function load () {
  // A local build beside this file first (build.js), then the platform package npm installed.
  for (const name of addonNames()) {
    const file = join(__dirname, name)
    if (existsSync(file)) return require(file)
  }
  const packages = packageNames()
  for (const pkg of packages) {
    try {
      return require(pkg)
    } catch (e) {
      // Only "this package is not installed" moves on; an addon that fails to load says why.
      if (e.code !== 'MODULE_NOT_FOUND' || !String(e.message).includes(pkg)) throw e
    }
  }
  const here = platforms()[0] || `${process.platform}-${process.arch}`
  const wanted = packages.length
    ? `the package ${packages.join(' or ')} should have provided it: npm installs it with leasehold-lock as an optional dependency, unless optional dependencies were omitted or the lockfile was made on another platform (reinstall leasehold-lock on this machine)`
    : 'no prebuilt package exists for this platform'
  throw new Error(
    `leasehold-lock: no native addon for ${here}: ${wanted}; or build it from source (Rust 1.88+): \`cargo build --release -p leasehold-node && node bindings/node/build.js --release\` in a checkout of leasehold`
  )
}

const native = load()

/** A failure the native side returned: `{ code, message, pids? }`. */
function isFailure (r) {
  return r !== null && typeof r === 'object' && typeof r.code === 'string' && typeof r.message === 'string' && !Array.isArray(r)
}

/** Every failure of this package (see index.d.ts): an Error with a stable `code`. */
class LeaseholdError extends Error {
  constructor (message, code, pids) {
    super(message)
    this.code = code
    if (pids !== undefined && pids !== null) this.pids = pids
  }

  get name () {
    return 'LeaseholdError'
  }
}

/** The Error a failure is thrown as. */
function toError (f) {
  return new LeaseholdError(f.message, f.code, f.pids)
}

/**
 * What a wait its `signal` ended rejects with: `signal.reason` (an AbortError, or a
 * TimeoutError for AbortSignal.timeout) with `code: 'CANCELLED'` on it, as the platform's own
 * APIs reject; a reason that is not an object (`abort('stop')`), or one that takes no
 * property, is the `cause` of a LeaseholdError CANCELLED instead.
 */
function aborted (signal, cancelled) {
  const reason = signal.reason
  if (reason !== null && (typeof reason === 'object' || typeof reason === 'function')) {
    try {
      Object.defineProperty(reason, 'code', { value: 'CANCELLED', configurable: true, writable: true })
      return reason
    } catch {}
  }
  const e = new LeaseholdError(cancelled.message, 'CANCELLED')
  e.cause = reason
  return e
}

/** The value of a native result, or the failure thrown. */
function settle (r) {
  if (isFailure(r)) throw toError(r)
  return r
}

/** An argument error of the JavaScript face (the native side never saw the call). */
function invalid (message) {
  return toError({ code: 'INVALID_INPUT', message })
}

function checkString (value, what) {
  if (typeof value !== 'string') throw invalid(`${what} must be a string, not ${typeof value}`)
}

function checkSignal (signal) {
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw invalid('signal must be an AbortSignal')
  }
}

/** The options the native side takes (the signal stays here). */
function nativeOptions (options) {
  if (options === undefined || options === null) return {}
  if (typeof options !== 'object') throw invalid('options must be an object')
  const { timeoutMs, shared, allowNetworkFs, allowSharedState, onSharedMount } = options
  if (timeoutMs !== undefined && typeof timeoutMs !== 'number') throw invalid('timeoutMs must be a number of milliseconds')
  return {
    timeoutMs,
    shared: shared === true,
    allowNetworkFs: allowNetworkFs === true,
    allowSharedState: allowSharedState === true,
    recordTtlMs: recordTtlMs(onSharedMount)
  }
}

/**
 * The record lease's TTL that `onSharedMount` asks for: `undefined` for `'refuse'` (the
 * default), `record.ttlMs` for `{ record: { ttlMs } }` (the native side checks the number).
 */
function recordTtlMs (onSharedMount) {
  if (onSharedMount === undefined || onSharedMount === 'refuse') return undefined
  const record = onSharedMount !== null && typeof onSharedMount === 'object' ? onSharedMount.record : undefined
  if (record === null || typeof record !== 'object' || typeof record.ttlMs !== 'number') {
    throw invalid("onSharedMount must be 'refuse' or { record: { ttlMs } } with a number of milliseconds")
  }
  return record.ttlMs
}

/**
 * Runs `wait(waiter)` with a native Waiter that `signal` cancels: an 'abort' ends the wait
 * promptly through the library's CancelToken (a signal aborted already cancels it before
 * it starts). Without a signal the waiter has no token.
 */
async function withSignal (signal, wait) {
  checkSignal(signal)
  const waiter = new native.Waiter(signal !== undefined)
  if (signal === undefined) return wait(waiter)
  const onAbort = () => waiter.cancel()
  signal.addEventListener('abort', onAbort, { once: true })
  if (signal.aborted) waiter.cancel()
  // The wait ended by the signal, thrown or returned as a failure: the signal's reason.
  const cancelled = (e) => e !== null && typeof e === 'object' && e.code === 'CANCELLED' && signal.aborted &&
    (e instanceof LeaseholdError || isFailure(e))
  try {
    const got = await wait(waiter)
    if (cancelled(got)) throw aborted(signal, toError(got))
    return got
  } catch (e) {
    throw (e instanceof LeaseholdError && cancelled(e)) ? aborted(signal, e) : e
  } finally {
    signal.removeEventListener('abort', onAbort)
  }
}

// The native wait is polled on this thread (src/drive.rs): its outcome comes back at once
// when the first poll settles it, else through `done`, which a poll that finds the wait still
// going on calls with no argument. The promise settles with the Lease itself, in that call:
// the caller's `await` resumes one microtask later, not after a chain of async wrappers.
function waitFor (waiter, path, opts) {
  return new Promise((resolve, reject) => {
    const end = (got) => {
      try {
        resolve(new Lease(settle(got), path, opts.shared))
      } catch (e) {
        reject(e)
      }
    }
    const now = waiter.acquire(path, opts, (...got) => { if (got.length > 0) end(got[0]) })
    if (now !== null && now !== undefined) end(now)
  })
}

const kNative = Symbol('leasehold.native')

/** An exclusive or shared lease (see index.d.ts). */
class Lease {
  // `path` and `shared`, when given, are what the native lease would answer (the path as
  // given, the mode asked for): two calls into the addon fewer on the way to the caller.
  constructor (held, path, shared) {
    if (!(held instanceof native.NativeLease)) throw new TypeError('use Lease.acquire or Lease.tryAcquire')
    this[kNative] = held
    this.path = path === undefined ? held.path : path
    this.shared = shared === undefined ? held.shared : shared
    this.fencingToken = held.fencingToken ?? null
    Object.freeze(this)
  }

  // Not `async`: without a signal the wait's own promise is returned, so that a grant
  // reaches the caller in one microtask (an async wrapper adds a few per level). Argument
  // errors still reject rather than throw.
  static acquire (path, options) {
    try {
      checkString(path, 'path')
      const opts = nativeOptions(options)
      const signal = options ? options.signal : undefined
      checkSignal(signal)
      // The library's first step, taken here without a trip to the runtime's threads: free
      // now, or unusable, settles at once; contended goes on to wait (the library's acquire
      // tries once more before it waits, in its own order).
      if (!(signal && signal.aborted) && opts.timeoutMs !== 0) {
        const now = native.tryAcquire(path, opts)
        if (now !== null) return Promise.resolve(new Lease(settle(now), path, opts.shared))
      }
      if (signal === undefined) return waitFor(new native.Waiter(false), path, opts)
      return withSignal(signal, (w) => waitFor(w, path, opts))
    } catch (e) {
      return Promise.reject(e)
    }
  }

  static tryAcquire (path, options) {
    checkString(path, 'path')
    const now = native.tryAcquire(path, nativeOptions(options))
    return now === null ? null : new Lease(settle(now))
  }

  verify () {
    const f = this[kNative].verify()
    if (f !== null && f !== undefined) throw toError(f)
  }

  release () {
    this[kNative].release()
  }
}

if (typeof Symbol.dispose === 'symbol') {
  Lease.prototype[Symbol.dispose] = function dispose () {
    this.release()
  }
}

function holders (path) {
  checkString(path, 'path')
  const h = settle(native.holders(path))
  return h.state === 'held' ? { state: 'held', pids: h.pids } : { state: h.state }
}

/**
 * The opt-ins a store's `open` takes, as the native side sees them: only `true` opts in
 * (`allowNetworkFs`, `allowSharedState`; see LeaseOptions in index.d.ts).
 */
function optIns (options) {
  const { allowNetworkFs, allowSharedState } = options ?? {}
  return { allowNetworkFs: allowNetworkFs === true, allowSharedState: allowSharedState === true }
}

/** `optIns` and `onSharedMount`, for the stores whose leases take a record lease. */
function leaseOptIns (options) {
  return { ...optIns(options), recordTtlMs: recordTtlMs((options ?? {}).onSharedMount) }
}

/** The store-wide authority over the multi-root workspace registry (see index.d.ts). */
class Registry {
  constructor (inner) {
    if (!(inner instanceof native.NativeRegistry)) throw new TypeError('use Registry.open')
    this[kNative] = inner
    Object.freeze(this)
  }

  static async open (options) {
    if (options === null || typeof options !== 'object') throw invalid('Registry.open needs { home }')
    const { home, leasePath, timeoutMs, signal } = options
    checkString(home, 'home')
    if (leasePath !== undefined) checkString(leasePath, 'leasePath')
    if (timeoutMs !== undefined && typeof timeoutMs !== 'number') throw invalid('timeoutMs must be a number of milliseconds')
    const opened = await withSignal(signal, (w) => w.openRegistry({ home, leasePath, timeoutMs, ...leaseOptIns(options) }))
    return new Registry(settle(opened))
  }

  get state () {
    return this[kNative].state
  }

  scope () {
    return this[kNative].scope()
  }

  grants (primary, path) {
    checkString(primary, 'primary')
    checkString(path, 'path')
    return this[kNative].grants(primary, path)
  }

  async add (primary, root) {
    checkString(primary, 'primary')
    checkString(root, 'root')
    settle(await this[kNative].add(primary, root))
  }

  async remove (primary, root) {
    checkString(primary, 'primary')
    checkString(root, 'root')
    settle(await this[kNative].remove(primary, root))
  }

  async refresh () {
    return settle(await this[kNative].refresh())
  }

  async close () {
    await this[kNative].close()
  }
}

/** One writer per append-only JSON-lines session log (see index.d.ts). */
class SessionLog {
  #inner
  #tail = Promise.resolve()

  constructor (inner) {
    if (!(inner instanceof native.NativeSessionLog)) throw new TypeError('use SessionLog.open')
    this.#inner = inner
  }

  static open (dir, id, options) {
    checkString(dir, 'dir')
    checkString(id, 'id')
    return new SessionLog(settle(native.openSessionLog(dir, id, leaseOptIns(options))))
  }

  /** Appends run one at a time, in call order (each waits for the one before it). */
  append (record) {
    let text
    try {
      text = JSON.stringify(record)
    } catch (e) {
      return Promise.reject(invalid(`record cannot be written as JSON: ${e.message}`))
    }
    if (text === undefined) {
      return Promise.reject(invalid(`a record of type ${typeof record} has no JSON text; append a value JSON can write (an object, array, string, number, boolean or null)`))
    }
    const run = () => this.#inner.append(text).then(settle)
    const done = this.#tail.then(run, run)
    this.#tail = done.catch(() => {})
    return done
  }

  close () {
    this.#inner.close()
  }

  static read (dir, id, options) {
    checkString(dir, 'dir')
    checkString(id, 'id')
    return settle(native.readSession(dir, id, optIns(options))).map((line) => JSON.parse(line))
  }
}

/** Isolated results, each operation under its ID's lease (see index.d.ts). */
class ResultStore {
  #inner

  constructor (inner) {
    if (!(inner instanceof native.NativeResultStore)) throw new TypeError('use ResultStore.open')
    this.#inner = inner
  }

  static open (root, options) {
    checkString(root, 'root')
    const timeoutMs = options ? options.timeoutMs : undefined
    if (timeoutMs !== undefined && typeof timeoutMs !== 'number') throw invalid('timeoutMs must be a number of milliseconds')
    return new ResultStore(settle(native.openResultStore(root, timeoutMs, leaseOptIns(options))))
  }

  async stage (id, from) {
    checkString(id, 'id')
    checkString(from, 'from')
    settle(await this.#inner.stage(id, from))
  }

  async paths (id) {
    checkString(id, 'id')
    return settle(await this.#inner.paths(id))
  }

  async finish (id) {
    checkString(id, 'id')
    settle(await this.#inner.finish(id))
  }

  async apply (id, to) {
    checkString(id, 'id')
    checkString(to, 'to')
    settle(await this.#inner.apply(id, to))
  }

  async discard (id) {
    checkString(id, 'id')
    settle(await this.#inner.discard(id))
  }

  async abort (id) {
    checkString(id, 'id')
    settle(await this.#inner.abort(id))
  }

  async pending () {
    return settle(await this.#inner.pending())
  }

  async sweep (olderThanSec) {
    if (typeof olderThanSec !== 'number') throw invalid('olderThanSec must be a number of seconds')
    return settle(await this.#inner.sweep(olderThanSec))
  }

  async gc (options) {
    const olderThanSec = options ? options.olderThanSec : undefined
    if (olderThanSec !== undefined && typeof olderThanSec !== 'number') throw invalid('olderThanSec must be a number of seconds')
    return settle(await this.#inner.gc(olderThanSec))
  }
}

const ENCODINGS = ['json', 'utf8', 'buffer']

/**
 * A file of your own shared by several processes (see index.d.ts): lock-free reads, updates
 * under the document's lease with the caller's function (which may be async) run while it is
 * held, a compare-and-set and a watch. The protocol is the Rust library's.
 */
class Document {
  #inner
  #path
  #opts
  #encoding

  constructor (inner, path, opts, encoding) {
    if (!(inner instanceof native.NativeDocument)) throw new TypeError('use Document.open')
    this.#inner = inner
    this.#path = path
    this.#opts = opts
    this.#encoding = encoding
  }

  static open (path, options) {
    checkString(path, 'path')
    if (options !== undefined && (options === null || typeof options !== 'object')) throw invalid('options must be an object')
    const { lockPath, encoding = 'json', allowSharedState, onSharedMount } = options ?? {}
    if (lockPath !== undefined) checkString(lockPath, 'lockPath')
    if (!ENCODINGS.includes(encoding)) throw invalid(`encoding must be one of ${ENCODINGS.join(', ')}, not ${encoding}`)
    const opts = { lockPath, json: encoding === 'json', allowSharedState: allowSharedState === true, recordTtlMs: recordTtlMs(onSharedMount) }
    return new Document(settle(native.openDocument(path, opts)), path, opts, encoding)
  }

  get path () { return this.#path }

  get lockPath () { return this.#inner.lockPath }

  get encoding () { return this.#encoding }

  #decode (content) {
    if (content === null || content === undefined) return undefined
    if (this.#encoding === 'json') return JSON.parse(content.toString('utf8'))
    if (this.#encoding === 'utf8') return content.toString('utf8')
    return content
  }

  #encode (value) {
    if (this.#encoding === 'json') {
      const text = JSON.stringify(value, null, 2)
      if (text === undefined) throw invalid('the new value has no JSON text (undefined or a function)')
      return Buffer.from(text + '\n', 'utf8')
    }
    if (this.#encoding === 'utf8') return Buffer.from(String(value), 'utf8')
    return Buffer.from(value)
  }

  /** `{ value, version }` of the current version, or null without a document; no lock. */
  read () {
    const s = settle(this.#inner.read())
    if (s === null) return null
    let value
    try {
      value = this.#decode(s.content)
    } catch (e) {
      // The library's wording of the same case (an update refuses it with this code too).
      throw toError({ code: 'INVALID_INPUT', message: `${this.#path}: the document does not parse as JSON (${e.message}); it is left as it is: repair it, or replace it explicitly` })
    }
    return { value, version: s.version }
  }

  update (fn, options) {
    return this.#update(fn, options, undefined)
  }

  updateIf (version, fn, options) {
    checkString(version, 'version')
    return this.#update(fn, options, version)
  }

  async #update (fn, options, expected) {
    if (typeof fn !== 'function') throw invalid('fn must be a function')
    if (options !== undefined && (options === null || typeof options !== 'object')) throw invalid('options must be an object')
    const { timeoutMs, signal } = options ?? {}
    if (timeoutMs !== undefined && typeof timeoutMs !== 'number') throw invalid('timeoutMs must be a number of milliseconds')
    const edit = settle(await withSignal(signal, (w) => w.beginDocument(this.#path, this.#opts, timeoutMs, expected)))
    let next
    let content
    try {
      const current = this.#decode(edit.current)
      next = await fn(current)
      if (next === undefined) next = current
      content = this.#encode(next)
    } catch (e) {
      edit.abort()
      throw e
    }
    const written = settle(await edit.commit(content))
    return { value: next, version: written.version }
  }

  /**
   * Calls `listener({ value, version })` for every new version (coalescing those written
   * faster than they are read); errors go to `options.onError` (default: a process warning).
   * Returns the function that stops it. A watch never keeps the process alive.
   */
  watch (listener, options) {
    if (typeof listener !== 'function') throw invalid('listener must be a function')
    const onError = options && typeof options.onError === 'function'
      ? options.onError
      : (e) => process.emitWarning(e.message, { code: e.code })
    let stopped = false
    const watch = this.#inner.watch((event) => {
      if (stopped) return
      if (isFailure(event)) return onError(toError(event))
      let value
      try {
        value = this.#decode(event.content)
      } catch (e) {
        return onError(e)
      }
      listener({ value, version: event.version })
    })
    return () => {
      stopped = true
      watch.stop()
    }
  }
}

module.exports = { Lease, holders, Registry, SessionLog, ResultStore, Document, LeaseholdError }
