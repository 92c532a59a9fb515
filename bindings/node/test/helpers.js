'use strict'
// What the node --test files share: the package under test, child processes that speak in
// lines (a handshake, never a sleep), and looks at kernel state (/proc/locks).
const { spawn } = require('node:child_process')
const { mkdtempSync, statSync, readFileSync, rmSync } = require('node:fs')
const { tmpdir } = require('node:os')
const { join } = require('node:path')
const readline = require('node:readline')

/** The package: LEASEHOLD_NODE (the Rust integration test's package dir), else this one. */
const PKG = process.env.LEASEHOLD_NODE ?? join(__dirname, '..')
const lh = require(PKG)
/** The CLI binary, where the Rust test found one. */
const CLI = process.env.LEASEHOLD_CLI || null

function skip (t, what, why) {
  console.log(`SKIP: ${what}: ${why}`)
  t.skip(`${what}: ${why}`)
}

/** A fresh temporary directory, removed when the test ends. */
function tempDir (t) {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-node-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** A child process whose stdout lines can be awaited one by one. */
class Child {
  constructor (cmd, args, opts = {}) {
    this.proc = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'inherit'], ...opts })
    this.pid = this.proc.pid
    this.lines = []
    this.waiting = []
    this.exited = new Promise((resolve) => this.proc.on('exit', (code, signal) => {
      this.closed = true
      for (const w of this.waiting.splice(0)) w.reject(new Error(`child ${cmd} ${args.join(' ')} exited (${code ?? signal}) before printing a line`))
      resolve({ code, signal })
    }))
    readline.createInterface({ input: this.proc.stdout }).on('line', (line) => {
      const w = this.waiting.shift()
      if (w) w.resolve(line)
      else this.lines.push(line)
    })
  }

  /** The next line the child prints. */
  line () {
    if (this.lines.length) return Promise.resolve(this.lines.shift())
    if (this.closed) return Promise.reject(new Error('child exited'))
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }))
  }

  async expect (want) {
    const got = await this.line()
    if (!got.startsWith(want)) throw new Error(`child said ${JSON.stringify(got)}, wanted ${want}`)
    return got
  }

  send (line) {
    this.proc.stdin.write(line + '\n')
  }

  /** Ends it: closes its stdin and waits for its exit. */
  async finish () {
    this.proc.stdin.end()
    return this.exited
  }

  async kill (signal = 'SIGKILL') {
    this.proc.kill(signal)
    return this.exited
  }

  /** SIGKILLs its whole process group (spawned with detached: true). */
  async killGroup () {
    try { process.kill(-this.pid, 'SIGKILL') } catch {}
    return this.exited
  }
}

/** A Node child running test/child.js with these arguments (see there). */
function nodeChild (...args) {
  return new Child(process.execPath, ['--expose-gc', join(__dirname, 'child.js'), ...args], {
    env: { ...process.env, LEASEHOLD_NODE: PKG }
  })
}

/** Whether process `pid` waits in the kernel's lock queue for `path` (a `->` line of /proc/locks). */
function blockedOn (pid, path) {
  const ino = statSync(path).ino
  return readFileSync('/proc/locks', 'utf8').split('\n').some((l) => {
    const f = l.trim().split(/\s+/)
    return l.includes('->') && f[5] === String(pid) && l.includes(`:${ino} `)
  })
}

/** Resolves once `cond()` holds, looking again on every turn of the event loop (20 s at most). */
async function until (what, cond) {
  const end = Date.now() + 20000
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`)
    await new Promise((resolve) => setImmediate(resolve))
  }
}

/**
 * `promise`'s outcome, or 'timed out' after `limit` ms: a bound on a behaviour under test
 * (so that a wait that never ends fails the test instead of hanging it), not a synchronisation.
 */
function within (limit, promise) {
  let timer
  const bound = new Promise((resolve) => { timer = setTimeout(() => resolve('timed out'), limit) })
  return Promise.race([promise.then((v) => v, (e) => e), bound]).finally(() => clearTimeout(timer))
}

/** Nanoseconds on CLOCK_MONOTONIC (comparable across processes of this machine). */
const now = () => process.hrtime.bigint()
const ms = (ns) => Number(ns) / 1e6

module.exports = { lh, PKG, CLI, skip, tempDir, Child, nodeChild, blockedOn, until, within, now, ms }
