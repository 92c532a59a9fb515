'use strict'
// A Node process for the Document tests: `node doc-child.js ROLE PATH [N] [TTL_MS]`; one line
// per event, commands on stdin.
//   increment PATH N [TTL_MS]
//                      print `ready`, wait for a line, N updates (+1 of `n`), print `done`;
//                      with TTL_MS the document takes onSharedMount's record lease
//   plain PATH N       the same as a plain read-modify-write (atomic rename, no lease)
//   try PATH           one try-once update: print `updated` or `contended`
//   paced PATH N       N updates, each printing `version V` and waiting for a line
const readline = require('node:readline')
const fs = require('node:fs')
const { Document } = require(process.env.LEASEHOLD_NODE)

const [role, path, n, ttlMs] = process.argv.slice(2)
const out = (line) => process.stdout.write(line + '\n')
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]()
const bump = (d) => ({ n: ((d && d.n) || 0) + 1 })

async function main () {
  const doc = Document.open(path, ttlMs === undefined ? {} : { onSharedMount: { record: { ttlMs: Number(ttlMs) } } })
  if (role === 'increment' || role === 'plain') {
    out('ready')
    await lines.next()
    for (let i = 0; i < Number(n); i++) {
      if (role === 'increment') {
        await doc.update(bump, { timeoutMs: 60000 })
      } else {
        let d
        try { d = JSON.parse(fs.readFileSync(path, 'utf8')) } catch { d = undefined }
        const tmp = `${path}.${process.pid}`
        fs.writeFileSync(tmp, JSON.stringify(bump(d)))
        fs.renameSync(tmp, path)
      }
    }
    out('done')
  } else if (role === 'try') {
    try {
      await doc.update(bump, { timeoutMs: 0 })
      out('updated')
    } catch (e) {
      out(e.code === 'CONTENDED' ? 'contended' : `E ${e.code} ${e.message}`)
    }
  } else if (role === 'paced') {
    for (let i = 0; i < Number(n); i++) {
      const { version } = await doc.update(bump, { timeoutMs: 60000 })
      out(`version ${version}`)
      await lines.next()
    }
    out('done')
  }
  process.exit(0)
}

main().catch((e) => { out(`E ${e.code} ${e.message}`); process.exit(1) })
