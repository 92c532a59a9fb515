'use strict'
// A worker_thread terminated at any stage of `Lease.acquire` takes its waits and leases with
// it: afterwards every thread of the process can take the lock once its holder has gone.
// Each stage is reached by a message from the worker or by kernel state, never a sleep.
const test = require('node:test')
const assert = require('node:assert')
const { Worker } = require('node:worker_threads')
const { join } = require('node:path')
const { lh, PKG, tempDir, nodeChild, blockedOn, until, within } = require('./helpers')

// Says `started`, calls Lease.acquire (no limit) and says `waiting` once it returned its
// promise (a wait in progress), then `acquired` while it holds the lease.
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads')
const { Lease } = require(workerData.pkg)
parentPort.postMessage('started')
const wait = Lease.acquire(workerData.path, workerData.options)
parentPort.postMessage('waiting')
wait.then((lease) => { globalThis.kept = lease; parentPort.postMessage('acquired') },
  (e) => parentPort.postMessage('failed ' + e.code))
`

/** A worker running WORKER; `next(word)` resolves on its next message (which must be `word`). */
function worker (path, options = {}) {
  const w = new Worker(WORKER, { eval: true, workerData: { pkg: PKG, path, options } })
  const said = []
  const waiting = []
  w.on('message', (m) => { const r = waiting.shift(); if (r) r(m); else said.push(m) })
  w.next = async (word) => {
    const got = said.length ? said.shift() : await new Promise((resolve) => waiting.push(resolve))
    assert.strictEqual(got, word)
  }
  return w
}

/** The main thread takes the lock within 5 s (a bound on a hang, not a synchronisation). */
async function mainThreadAcquires (path) {
  const got = await within(5000, lh.Lease.acquire(path, { timeoutMs: 5000 }))
  assert.ok(got instanceof lh.Lease, `the main thread could not take the lock: ${got}`)
  got.release()
}

const linux = process.platform === 'linux'

test('a worker terminated before its wait starts leaves nothing held', async (t) => {
  const path = join(tempDir(t), 'w.lock')
  const w = worker(path)
  await w.next('started')
  await w.terminate()
  await mainThreadAcquires(path)
})

test('a worker terminated while it waits behind this process takes its wait with it', async (t) => {
  const path = join(tempDir(t), 'w.lock')
  const held = lh.Lease.tryAcquire(path)
  const w = worker(path)
  await w.next('started')
  await w.next('waiting')
  await w.terminate()
  held.release()
  await mainThreadAcquires(path)
})

test('a worker terminated while it waits in the kernel takes its wait with it', { skip: !linux && 'needs /proc/locks' }, async (t) => {
  const path = join(tempDir(t), 'w.lock')
  const holder = nodeChild('hold', path)
  t.after(() => holder.kill())
  await holder.expect('H')
  for (const options of [{}, { timeoutMs: 60000 }, { shared: true }]) {
    const w = worker(path, options)
    await w.next('started')
    await w.next('waiting')
    await until('the worker waits in the kernel', () => blockedOn(process.pid, path))
    await w.terminate()
  }
  holder.send('release')
  await holder.expect('R')
  await mainThreadAcquires(path)
})

test('a worker terminated while it holds the lease releases it', async (t) => {
  const path = join(tempDir(t), 'w.lock')
  for (const options of [{}, { shared: true }]) {
    const held = lh.Lease.tryAcquire(path)
    const w = worker(path, options)
    await w.next('started')
    await w.next('waiting')
    held.release() // granted to the worker's wait
    await w.next('acquired')
    await w.terminate()
    await mainThreadAcquires(path)
  }
})
