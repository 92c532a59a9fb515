'use strict'
// npm's proper-lockfile as a `leasehold bench` contender: its defaults (a `<file>.lock`
// directory, mtime-based staleness after 10 s), with retries so that a lock call waits —
// forever, from 1 ms doubling to 16 ms between tries (leasehold's own poll back-off where no
// kernel queue exists). leasehold bench --contender proper-lockfile='node bindings/node/bench/proper-lockfile.js'
const { closeSync, openSync } = require('node:fs')
const lockfile = require('proper-lockfile')
const { run } = require('./protocol')

const retries = { forever: true, minTimeout: 1, maxTimeout: 16, factor: 2 }

closeSync(openSync(process.env.LEASEHOLD_BENCH_LOCK, 'a')) // it locks an existing file
run({
  acquire: (lock) => lockfile.lock(lock, { retries })
}).catch((e) => { console.error(`leasehold bench worker (proper-lockfile): ${e.message}`); process.exit(1) })
