// The package loads from ECMAScript modules too (named exports of the CommonJS entry).
import test from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'
import { join } from 'node:path'

const require = createRequire(import.meta.url)
const { PKG } = require('./helpers.js')

test('import { Lease, holders, Registry, SessionLog, ResultStore, LeaseholdError } works', async () => {
  const mod = await import(pathToFileURL(join(PKG, 'index.js')).href)
  for (const name of ['Lease', 'holders', 'Registry', 'SessionLog', 'ResultStore', 'LeaseholdError']) {
    assert.equal(typeof mod[name], 'function', name)
  }
  assert.equal(mod.default.Lease, mod.Lease)
})
