'use strict'
// `leasehold-lock/proper-lockfile`: proper-lockfile 4's API (lock, unlock, check and their
// Sync forms, with its options and error codes) over leasehold's kernel leases, so that
// switching is one line: `require('proper-lockfile')` → `require('leasehold-lock/proper-lockfile')`.
//
// This file converts and reports; it decides nothing about locking. The lease, its wait, its
// verification and the refusal of unusable lock paths are the library's (through index.js).
// What it converts:
//   - the lock is a lease on the lock file `<file>.lock` (or `lockfilePath`): a sibling of the
//     file, never the file itself, so a temporary + rename rewrite of the file keeps the lock;
//   - `retries` (a count, a `retry` options object or an array of delays) becomes the one
//     bounded wait those retries would have spent at most: no polling;
//   - the library's CONTENDED is ELOCKED; a directory at the lock path is proper-lockfile's
//     own lock (its `mkdir`), and is ELOCKED too: the two libraries never both hold a file;
//   - a periodic `verify()` (every `update` ms) that finds the lease lost calls `onCompromised`
//     with an ECOMPROMISED error (by default thrown, as proper-lockfile does).

const fs = require('node:fs')
const path = require('node:path')
const { Lease, holders } = require('./index.js')

/** The leases this process holds through this module, by canonical file path. */
const locks = new Map()

function failure (code, message, extra) {
  return Object.assign(new Error(message), { code }, extra)
}

function invalid (message) {
  return failure('INVALID_INPUT', message)
}

/**
 * The longest a proper-lockfile `lock()` with these `retries` would go on trying, in ms
 * (Infinity for `forever`): the sum of the delays the `retry` package computes (randomized
 * delays at their upper bound), cut at the first attempt `maxRetryTime` allows no retry after.
 */
function retryBudgetMs (retries) {
  if (retries === undefined || retries === null || retries === 0 || retries === false) return 0
  let delays
  let maxRetryTime = Infinity
  if (typeof retries === 'number') {
    if (!Number.isFinite(retries) && retries !== Infinity) throw invalid(`retries must be a number of retries or a retry options object, not ${retries}`)
    if (retries === Infinity) return Infinity
    delays = backoff({ retries })
  } else if (Array.isArray(retries)) {
    delays = retries.map(Number)
  } else if (typeof retries === 'object') {
    if (retries.forever) return Infinity
    delays = backoff(retries)
    if (typeof retries.maxRetryTime === 'number' && retries.maxRetryTime > 0) maxRetryTime = retries.maxRetryTime
  } else {
    throw invalid(`retries must be a number of retries or a retry options object, not ${typeof retries}`)
  }
  if (delays.some((d) => !(d >= 0))) throw invalid('retries: every delay must be a number of ms, 0 or more')
  delays.sort((a, b) => a - b)
  // An attempt at time t fails; the retry package schedules another while t < maxRetryTime.
  let elapsed = 0
  for (const d of delays) {
    if (elapsed >= maxRetryTime) break
    elapsed += d
  }
  return elapsed
}

/** The delays of the `retry` package's exponential backoff (its defaults where unset). */
function backoff (options) {
  const o = { retries: 10, factor: 2, minTimeout: 1000, maxTimeout: Infinity, randomize: false, ...options }
  if (o.minTimeout > o.maxTimeout) throw invalid('retries: minTimeout is greater than maxTimeout')
  const delays = []
  const most = o.randomize ? 2 : 1
  for (let i = 0; i < o.retries; i++) delays.push(Math.min(Math.round(most * o.minTimeout * Math.pow(o.factor, i)), o.maxTimeout))
  return delays
}

function checkOptions (options) {
  if (options === undefined || options === null) return {}
  if (typeof options !== 'object') throw invalid('options must be an object')
  if (options.lockfilePath !== undefined && typeof options.lockfilePath !== 'string') throw invalid('lockfilePath must be a string')
  if (options.onCompromised !== undefined && typeof options.onCompromised !== 'function') throw invalid('onCompromised must be a function')
  return options
}

function checkFile (file) {
  if (typeof file !== 'string') throw invalid(`file must be a string, not ${typeof file}`)
}

/** The canonical path of `file`: its realpath (it must exist), or with `realpath: false` the absolute path. */
function canonicalSync (file, o) {
  checkFile(file)
  return o.realpath === false ? path.resolve(file) : fs.realpathSync(file)
}

async function canonical (file, o) {
  checkFile(file)
  return o.realpath === false ? path.resolve(file) : fs.promises.realpath(file)
}

function lockPathOf (file, o) {
  return o.lockfilePath !== undefined ? o.lockfilePath : `${file}.lock`
}

/** A directory at the lock path is proper-lockfile's lock (it locks by `mkdir`). */
function isDirectory (lockPath) {
  try {
    return fs.lstatSync(lockPath).isDirectory()
  } catch {
    return false
  }
}

function proprietary (file, lockPath, cause) {
  return failure('ELOCKED', `${lockPath} is a directory: proper-lockfile's lock of ${file}, held by a process still on proper-lockfile (or left by one that died). A fleet switches together: stop the processes on proper-lockfile, then remove the directory if none of them holds it`, { file, cause })
}

/** The library's refusal as proper-lockfile reports it. */
function converted (e, file, lockPath, budgetMs) {
  if (e && e.code === 'CONTENDED') {
    const advice = budgetMs > 0
      ? `lock() waited ${budgetMs} ms, what its retries allow: pass more retries to wait longer`
      : 'lock() tries once without retries: pass retries (e.g. { retries: 10 }) to wait for it'
    return failure('ELOCKED', `Lock file is already being held: ${lockPath}${heldBy(e.pids)}; ${advice}`, { file, pids: e.pids, cause: e })
  }
  if (e && e.code === 'INVALID_INPUT' && isDirectory(lockPath)) return proprietary(file, lockPath, e)
  return e
}

/** " (by pid N)" where the OS revealed the holder; this process is named as such. */
function heldBy (pids) {
  if (!Array.isArray(pids) || pids.length === 0) return ''
  return ` (by ${pids.map((p) => p === process.pid ? `this process, pid ${p}` : `pid ${p}`).join(', ')})`
}

function leaseOptions (o) {
  return { allowNetworkFs: o.allowNetworkFs === true, allowSharedState: o.allowSharedState === true }
}

/** proper-lockfile's refresh interval, here the interval of the lease's verification. */
function updateMs (o) {
  const stale = Math.max(typeof o.stale === 'number' ? o.stale : 10000, 2000)
  const update = o.update == null ? stale / 2 : (o.update || 0)
  return Math.max(Math.min(update, stale / 2), 1000)
}

/** Records `lease` as this process's lock of `file`; returns the record. */
function hold (file, lockPath, lease, o) {
  const onCompromised = o.onCompromised || ((err) => { throw err })
  const record = { lease, lockPath, released: false, timer: null }
  record.timer = setInterval(() => {
    try {
      lease.verify()
    } catch (e) {
      end(file, record)
      onCompromised(failure('ECOMPROMISED', e.message, { file, cause: e }))
    }
  }, updateMs(o))
  record.timer.unref()
  locks.set(file, record)
  return record
}

function end (file, record) {
  record.released = true
  clearInterval(record.timer)
  if (locks.get(file) === record) locks.delete(file)
  record.lease.release()
}

function alreadyReleased () {
  return failure('ERELEASED', 'Lock is already released')
}

async function lock (file, options) {
  const o = checkOptions(options)
  const timeoutMs = retryBudgetMs(o.retries)
  const canon = await canonical(file, o)
  const lockPath = lockPathOf(canon, o)
  let lease
  try {
    lease = await Lease.acquire(lockPath, { ...leaseOptions(o), timeoutMs: timeoutMs === Infinity ? undefined : Math.ceil(timeoutMs) })
  } catch (e) {
    throw converted(e, canon, lockPath, timeoutMs)
  }
  const record = hold(canon, lockPath, lease, o)
  return async function release () {
    if (record.released) throw alreadyReleased()
    end(canon, record)
  }
}

function lockSync (file, options) {
  const o = checkOptions(options)
  const r = o.retries
  if ((typeof r === 'number' && r > 0) || (r && typeof r.retries === 'number' && r.retries > 0)) {
    throw failure('ESYNC', 'Cannot use retries with the sync api: lockSync tries once; lock() waits')
  }
  const canon = canonicalSync(file, o)
  const lockPath = lockPathOf(canon, o)
  let lease
  try {
    lease = Lease.tryAcquire(lockPath, leaseOptions(o))
  } catch (e) {
    throw converted(e, canon, lockPath, 0)
  }
  if (lease === null) {
    const h = holders(lockPath)
    const pids = h.state === 'held' ? h.pids : undefined
    throw failure('ELOCKED', `Lock file is already being held: ${lockPath}${heldBy(pids)}; lockSync tries once: use lock() with retries to wait for it`, { file: canon, pids })
  }
  const record = hold(canon, lockPath, lease, o)
  return function releaseSync () {
    if (record.released) throw alreadyReleased()
    end(canon, record)
  }
}

function unlockHeld (canon) {
  const record = locks.get(canon)
  if (!record) throw failure('ENOTACQUIRED', `Lock is not acquired/owned by you: ${canon} is not locked by this process (through lock or lockSync)`)
  end(canon, record)
}

async function unlock (file, options) {
  const o = checkOptions(options)
  unlockHeld(await canonical(file, o))
}

function unlockSync (file, options) {
  const o = checkOptions(options)
  unlockHeld(canonicalSync(file, o))
}

/** Whether the lock is held now, by any process (this one included). */
function isLocked (canon, o) {
  const lockPath = lockPathOf(canon, o)
  let h
  try {
    h = holders(lockPath)
  } catch (e) {
    if (isDirectory(lockPath)) return true
    throw e
  }
  if (h.state !== 'unknown') return h.state === 'held'
  // The OS does not reveal holders here: take the lease and drop it at once.
  const lease = Lease.tryAcquire(lockPath, leaseOptions(o))
  if (lease === null) return true
  lease.release()
  return false
}

async function check (file, options) {
  const o = checkOptions(options)
  return isLocked(await canonical(file, o), o)
}

function checkSync (file, options) {
  const o = checkOptions(options)
  return isLocked(canonicalSync(file, o), o)
}

module.exports = lock
module.exports.lock = lock
module.exports.unlock = unlock
module.exports.check = check
module.exports.lockSync = lockSync
module.exports.unlockSync = unlockSync
module.exports.checkSync = checkSync
module.exports.retryBudgetMs = retryBudgetMs
