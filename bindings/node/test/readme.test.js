'use strict'
// The README's examples run as pasted: each ```js block is written to a fresh directory under
// the file name its first line gives (ending in .mjs: an ES module; in .cjs: CommonJS), with
// `leasehold-lock` resolving to the package under test, and run by `node`; it must exit 0.
// Blocks of another language are not run here: crates/leasehold-stores/tests/doc_blocks.rs
// checks that each is marked with the reason.
const test = require('node:test')
const assert = require('node:assert/strict')
const { join } = require('node:path')
const fs = require('node:fs')
const { execFile } = require('node:child_process')
const { PKG, tempDir } = require('./helpers')

const README = join(__dirname, '..', 'README.md')

/** The fenced blocks of `text`: their info string, first line number and body. */
function blocks (text) {
  const found = []
  const lines = text.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const open = lines[i].match(/^```(.*)$/)
    if (!open) continue
    const start = i + 1
    let end = start
    while (end < lines.length && lines[end] !== '```') end++
    found.push({ info: open[1].trim(), line: start, body: lines.slice(start, end).join('\n') + '\n' })
    i = end
  }
  return found
}

const examples = blocks(fs.readFileSync(README, 'utf8'))

test('the README has its examples', () => {
  assert.ok(examples.filter((b) => b.info === 'js').length >= 5, 'the README lost its examples')
})

for (const b of examples.filter((b) => b.info === 'js')) {
  const file = b.body.split('\n')[0].match(/^\/\/ (\S+\.(?:mjs|cjs))$/)?.[1]
  test(`README.md:${b.line}: the example (${file}) runs as pasted`, async (t) => {
    assert.ok(file, `README.md:${b.line}: a js example's first line names its file, ending in .mjs or .cjs`)
    const dir = tempDir(t)
    fs.mkdirSync(join(dir, 'node_modules'))
    fs.symlinkSync(PKG, join(dir, 'node_modules', 'leasehold-lock'), 'dir')
    fs.writeFileSync(join(dir, file), b.body)
    const { code, stdout, stderr } = await new Promise((resolve) => {
      // A bound on a hung example (the test would otherwise never end), not a timing claim.
      execFile(process.execPath, [file], { cwd: dir, timeout: 60000 }, (err, stdout, stderr) =>
        resolve({ code: err ? (err.code ?? err.signal) : 0, stdout, stderr }))
    })
    assert.equal(code, 0, `README.md:${b.line} (${file}) failed:\n${stdout}${stderr}`)
  })
}
