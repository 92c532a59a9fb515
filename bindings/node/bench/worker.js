'use strict'
// The Node contender of `leasehold bench`: Lease.acquire (exclusive, unlimited wait) and
// release. leasehold bench --contender node='node bindings/node/bench/worker.js'
const { Lease } = require(process.env.LEASEHOLD_NODE ?? '..')
const { run } = require('./protocol')

run({
  acquire: async (lock) => {
    const lease = await Lease.acquire(lock)
    return () => lease.release()
  }
}).catch((e) => { console.error(`leasehold bench worker (node): ${e.message}`); process.exit(1) })
