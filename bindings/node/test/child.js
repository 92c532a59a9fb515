'use strict'
// A Node process for the multi-process tests: `node child.js ROLE ARGS...`; it prints one
// line per event and reads commands from stdin (a closed stdin ends it).
//   hold PATH [shared]   acquire (waiting), print `H <CLOCK_MONOTONIC ns>`; on `release`
//                        release and print `R`; exit when stdin closes
//   try PATH [shared]    print `got` or `busy` (tryAcquire), hold until stdin closes
//   record PATH TTL_MS   acquire with onSharedMount's record lease, print `H <fencingToken>`;
//                        on `verify` print `ok` or the error's code; on `release` release and
//                        print `R`; exit when stdin closes
//   registry HOME        open the registry, print its state; `add P R`, `close`, `state`
//   session DIR ID       open the log; `append JSON` prints `ok` or the error's code
//   gc PATH              acquire, drop the object, collect garbage until the lock is free,
//                        print `free`
const readline = require('node:readline')
const { Lease, Registry, SessionLog, holders } = require(process.env.LEASEHOLD_NODE)

const [role, a, b] = process.argv.slice(2)
const out = (line) => process.stdout.write(line + '\n')
const commands = readline.createInterface({ input: process.stdin })
const fail = (e) => out(`E ${e.code} ${e.message}`)

async function main () {
  if (role === 'hold') {
    let lease = await Lease.acquire(a, { shared: b === 'shared' })
    out(`H ${process.hrtime.bigint()}`)
    for await (const cmd of commands) {
      if (cmd === 'release' && lease) { lease.release(); lease = null; out('R') }
    }
  } else if (role === 'record') {
    const lease = await Lease.acquire(a, { onSharedMount: { record: { ttlMs: Number(b) } } })
    out(`H ${lease.fencingToken}`)
    for await (const cmd of commands) {
      if (cmd === 'verify') { try { lease.verify(); out('ok') } catch (e) { out(e.code) } }
      if (cmd === 'release') { lease.release(); out('R') }
    }
  } else if (role === 'try') {
    const lease = Lease.tryAcquire(a, { shared: b === 'shared' })
    out(lease ? 'got' : 'busy')
    for await (const _ of commands) {} // eslint-disable-line no-unused-vars
  } else if (role === 'registry') {
    const reg = await Registry.open({ home: a })
    out(reg.state)
    for await (const cmd of commands) {
      const [op, p, r] = cmd.split(' ')
      try {
        if (op === 'add') { await reg.add(p, r); out('ok') }
        if (op === 'close') { await reg.close(); out('closed') }
        if (op === 'state') out(reg.state)
        if (op === 'add-close') {
          // A mutation in flight when close() is called: both started in one turn.
          const adding = reg.add(p, r).then(() => 'ok', (e) => e.code)
          await reg.close()
          out(`closed ${await adding}`)
        }
      } catch (e) { fail(e) }
    }
  } else if (role === 'session') {
    const log = SessionLog.open(a, b)
    out('open')
    for await (const cmd of commands) {
      if (cmd.startsWith('append ')) {
        try { await log.append(JSON.parse(cmd.slice(7))); out('ok') } catch (e) { fail(e) }
      }
      if (cmd === 'close') { log.close(); out('closed') }
    }
  } else if (role === 'gc') {
    let lease = await Lease.acquire(a)
    out(`H ${holders(a).state}`)
    lease = null // eslint-disable-line no-unused-vars
    // The garbage collector finalizes the unreachable lease; its finalizer releases it.
    for (let i = 0; i < 1000 && holders(a).state !== 'free'; i++) {
      global.gc()
      await new Promise((resolve) => setImmediate(resolve))
    }
    out(holders(a).state)
    for await (const _ of commands) {} // eslint-disable-line no-unused-vars
  } else {
    throw new Error(`unknown role ${role}`)
  }
}

main().catch((e) => { fail(e); process.exitCode = 1 })
