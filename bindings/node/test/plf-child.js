'use strict'
// A process for proper-lockfile.test.js: `node plf-child.js ROLE LIB FILE [JSON]`, where LIB is
// `ours` (leasehold-lock/proper-lockfile) or the path of the real proper-lockfile package. It
// prints one line per event and reads commands from stdin (a closed stdin ends it).
//   hold LIB FILE [OPTIONS]   lock(FILE, OPTIONS), print `H` (or `E CODE MESSAGE`); on
//                             `release` release and print `R`
//   count LIB FILE N [OPTIONS]
//                             N times: lock(FILE, OPTIONS), read the number in FILE, write it
//                             + 1 atomically (temporary file + rename over FILE), release. Marks
//                             its hold with FILE.owner, created exclusively, so two holders at
//                             once are seen. Prints `done OK REFUSED` (REFUSED: ELOCKED or
//                             another refusal of lock), or `E CODE MESSAGE` for anything else.
//   compromised LIB FILE      lock(FILE, { update: 1000 }) with the default onCompromised,
//                             print `H`, and keep the event loop alive until killed
const { join } = require('node:path')
const fs = require('node:fs')
const readline = require('node:readline')

const [role, lib, file, a, b] = process.argv.slice(2)
const lockfile = require(lib === 'ours' ? join(process.env.LEASEHOLD_NODE, 'proper-lockfile.js') : lib)
const out = (line) => process.stdout.write(line + '\n')
const fail = (e) => out(`E ${e.code} ${e.message}`)

/** One increment of the counter in `file`, rewritten by a temporary file and a rename. */
function increment () {
  const owner = `${file}.owner`
  // 'wx' fails with EEXIST while another holder is inside: two holders at once.
  fs.writeFileSync(owner, String(process.pid), { flag: 'wx' })
  const n = Number(fs.readFileSync(file, 'utf8'))
  const tmp = `${file}.${process.pid}.tmp`
  fs.writeFileSync(tmp, String(n + 1))
  fs.renameSync(tmp, file)
  fs.unlinkSync(owner)
}

async function main () {
  if (role === 'hold') {
    let release = await lockfile.lock(file, a ? JSON.parse(a) : undefined)
    out('H')
    for await (const cmd of readline.createInterface({ input: process.stdin })) {
      if (cmd === 'release' && release) { await release(); release = null; out('R') }
    }
  } else if (role === 'count') {
    const options = b ? JSON.parse(b) : undefined
    let ok = 0
    let refused = 0
    for (let i = 0; i < Number(a); i++) {
      let release
      try {
        release = await lockfile.lock(file, options)
      } catch (e) {
        // ELOCKED, or proper-lockfile's failed takeover of a lock file it cannot remove.
        if (e.code === 'ELOCKED' || e.code === 'ENOTDIR') { refused++; continue }
        throw e
      }
      increment()
      ok++
      await release()
    }
    out(`done ${ok} ${refused}`)
  } else if (role === 'compromised') {
    await lockfile.lock(file, { update: 1000 })
    out('H')
    setInterval(() => {}, 1 << 30)
  } else {
    throw new Error(`unknown role ${role}`)
  }
}

main().catch((e) => { fail(e); process.exitCode = 1 })
