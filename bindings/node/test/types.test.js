'use strict'
// index.d.ts types the whole surface: test/usage.ts type-checks with `tsc --noEmit --strict`
// (typescript and @types/node are devDependencies; `npm ci` installs them).
const test = require('node:test')
const assert = require('node:assert/strict')
const { join } = require('node:path')
const { existsSync } = require('node:fs')
const { execFileSync } = require('node:child_process')
const { skip } = require('./helpers')

test('index.d.ts: test/usage.ts type-checks with tsc --noEmit --strict', (t) => {
  const tsc = join(__dirname, '..', 'node_modules', 'typescript', 'bin', 'tsc')
  if (!existsSync(tsc)) return skip(t, 'tsc --noEmit --strict', 'typescript is not installed (run npm ci in bindings/node)')
  try {
    execFileSync(process.execPath, [tsc, '--noEmit', '--strict', '-p', join(__dirname, 'tsconfig.json')], { encoding: 'utf8' })
  } catch (e) {
    assert.fail(`tsc found type errors:\n${e.stdout}${e.stderr}`)
  }
})
