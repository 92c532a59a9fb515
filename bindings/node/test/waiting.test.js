'use strict'
// Waiting costs the process nothing but memory: while 100 acquisitions wait in this process,
// a setInterval ticker keeps its pace, libuv's thread pool stays free for fs calls, and the
// process has at most a handful more threads (/proc/self/task) — the waits run on the
// library's tokio driver, not one thread (or one pool slot) each.
const test = require('node:test')
const assert = require('node:assert/strict')
const { join } = require('node:path')
const fs = require('node:fs')
const { lh, tempDir, nodeChild, blockedOn, until, within, now, ms } = require('./helpers')
const { Lease } = lh

const threads = () => fs.readdirSync('/proc/self/task').length
const WAITERS = 100

test('100 waits keep the event loop at its pace and add at most a handful of threads', async (t) => {
  const dir = tempDir(t)
  // Warm-up: the runtime's threads exist once one wait has run its course (a wait, not a
  // free lease, which settles without the runtime).
  const warm = join(dir, 'warm.lock')
  const warmHolder = nodeChild('hold', warm)
  await warmHolder.expect('H')
  const warming = Lease.acquire(warm)
  await until('the warm-up waits in the kernel', () => blockedOn(process.pid, warm))
  warmHolder.send('release')
  ;(await warming).release()
  await warmHolder.finish()
  const before = threads()

  const lock = join(dir, 'crowd.lock')
  const holder = nodeChild('hold', lock)
  await holder.expect('H')
  let acquired = 0
  const waits = Array.from({ length: WAITERS }, () => Lease.acquire(lock).then((l) => { acquired++; l.release() }))
  await until('this process waits in the kernel', () => blockedOn(process.pid, lock))
  const during = threads()

  // The ticker: 20 ticks of 10 ms while all 100 wait.
  const gaps = []
  let last = now()
  await new Promise((resolve) => {
    const timer = setInterval(() => {
      const at = now()
      gaps.push(ms(at - last))
      last = at
      if (gaps.length === 20) { clearInterval(timer); resolve() }
    }, 10)
  })
  // libuv's pool is free: an fs call completes while they wait.
  // (A wait on one of the pool's four threads each would keep it from ever running.)
  const started = now()
  const read = await within(2000, fs.promises.readFile(__filename))
  const fsTook = ms(now() - started)
  assert.ok(Buffer.isBuffer(read), `fs.readFile while ${WAITERS} waited: ${read}`)
  assert.equal(acquired, 0, 'nobody had the lease while the holder held it')

  holder.send('release')
  await Promise.all(waits)
  await holder.finish()
  assert.equal(acquired, WAITERS)
  const worst = Math.max(...gaps)
  const typical = gaps.sort((x, y) => x - y)[gaps.length >> 1]
  console.log(`threads: ${before} before, ${during} while ${WAITERS} waited; ticker's gaps: median ${typical.toFixed(1)} ms, longest ${worst.toFixed(1)} ms; fs.readFile ${fsTook.toFixed(2)} ms`)
  assert.ok(during - before <= 5, `${WAITERS} waits added ${during - before} threads`)
  // Its pace: 10 ms ticks (a blocked loop would not tick at all), with room for a loaded machine.
  assert.ok(typical < 50, `the ticker's median gap was ${typical} ms`)
  assert.ok(worst < 1000, `the ticker stalled ${worst} ms`)
  assert.ok(fsTook < 1000, `fs.readFile took ${fsTook} ms`)
})
