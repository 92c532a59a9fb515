'use strict'
// The `leasehold bench --contender` worker protocol (crates/leasehold-cli/src/cmd/bench/
// external.rs), shared by the Node contenders in this folder: `run({ acquire })` where
// `acquire(lock)` resolves to a release function.
//   role loop:  print R, read `go <end ns>`, until CLOCK_MONOTONIC >= end: stamp start,
//               acquire (exclusive, unlimited wait), stamp acquired, hold HOLD_NS asleep,
//               stamp released, release, again at once; then `r <start> <acquired> <released>`
//               per acquisition and `D <count>`.
//   role cycle: print R, read `go`, CYCLES acquire+release on the free lock in batches of
//               100, `b <ns>` as each batch ends, then `D <batches>`.
const readline = require('node:readline')

const role = process.env.LEASEHOLD_BENCH_ROLE
const lock = process.env.LEASEHOLD_BENCH_LOCK
const holdMs = Number(process.env.LEASEHOLD_BENCH_HOLD_NS) / 1e6
const cycles = Number(process.env.LEASEHOLD_BENCH_CYCLES || 0)
const now = process.hrtime.bigint // CLOCK_MONOTONIC on Linux, as the parent's stamps
// The hold sleeps (futex), as the built-in workers' thread::sleep: setTimeout cannot wait
// 100 µs, and a spinning holder would keep its waiters off a 2-core machine.
const cell = new Int32Array(new SharedArrayBuffer(4))
const hold = () => Atomics.wait(cell, 0, 0, holdMs)

function firstLine () {
  const rl = readline.createInterface({ input: process.stdin })
  return new Promise((resolve) => rl.once('line', (line) => { rl.close(); resolve(line) }))
}

async function run ({ acquire }) {
  process.stdout.write('R\n')
  const go = (await firstLine()).split(' ')
  if (role === 'loop') {
    const end = BigInt(go[1])
    const turns = []
    while (now() < end) {
      const t0 = now()
      const release = await acquire(lock)
      const t1 = now()
      hold()
      const t2 = now()
      await release()
      turns.push(`r ${t0} ${t1} ${t2}`)
    }
    turns.push(`D ${turns.length}`)
    process.stdout.write(turns.join('\n') + '\n')
  } else if (role === 'cycle') {
    const batches = Math.floor(cycles / 100)
    for (let b = 0; b < batches; b++) {
      const t0 = now()
      for (let i = 0; i < 100; i++) await (await acquire(lock))()
      const ns = now() - t0
      // Each batch is reported as it ends (outside its timing), so a slow locker still
      // answers within the parent's limit per line.
      process.stdout.write(`b ${ns}\n`)
    }
    process.stdout.write(`D ${batches}\n`)
  } else {
    throw new Error(`unknown LEASEHOLD_BENCH_ROLE ${role}`)
  }
}

module.exports = { run }
