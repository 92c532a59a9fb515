'use strict'
// Document across real processes: children speak in lines (doc-child.js), never sleeps.
const test = require('node:test')
const assert = require('node:assert/strict')
const { join } = require('node:path')
const fs = require('node:fs')
const { spawn } = require('node:child_process')
const { lh, PKG, CLI, skip, tempDir, Child } = require('./helpers')
const { Document } = lh

const WORKERS = 4
const INCREMENTS = 200

function docChild (...args) {
  return new Child(process.execPath, [join(__dirname, 'doc-child.js'), ...args], {
    env: { ...process.env, LEASEHOLD_NODE: PKG }
  })
}

async function race (path, role) {
  const workers = Array.from({ length: WORKERS }, () => docChild(role, path, String(INCREMENTS)))
  for (const w of workers) await w.expect('ready')
  for (const w of workers) w.send('go')
  for (const w of workers) {
    await w.expect('done')
    assert.equal((await w.exited).code, 0)
  }
  return JSON.parse(fs.readFileSync(path, 'utf8')).n
}

test('Document: 4 processes of 200 updates lose none', async (t) => {
  const dir = tempDir(t)
  const path = join(dir, 'count.json')
  assert.equal(await race(path, 'increment'), WORKERS * INCREMENTS)
  assert.deepEqual(fs.readdirSync(dir).sort(), ['count.json', 'count.json.lock'])
})

test('Document: the same increments as a plain read-modify-write lose some', async (t) => {
  const path = join(tempDir(t), 'count.json')
  const total = await race(path, 'plain')
  assert.ok(total < WORKERS * INCREMENTS, `nothing lost (${total}): the harness does not race`)
})

test('Document: the lease is held while an async fn runs; a throw writes nothing', async (t) => {
  const path = join(tempDir(t), 'count.json')
  const doc = Document.open(path)
  await assert.rejects(doc.update(async () => {
    assert.equal(await docChild('try', path).line(), 'contended')
    throw new Error('changed my mind')
  }), /changed my mind/)
  assert.equal(doc.read(), null)
  assert.equal(await docChild('try', path).line(), 'updated')
  const done = await doc.update(async (cur) => {
    assert.equal(await docChild('try', path).line(), 'contended')
    cur.x = 1 // changed in place: returning undefined writes it
  })
  assert.deepEqual(done.value, { n: 1, x: 1 })
  assert.deepEqual(doc.read(), done)
})

test('Document: updateIf loses to a concurrent update and says so', async (t) => {
  const path = join(tempDir(t), 'count.json')
  const doc = Document.open(path)
  const seen = await doc.update(() => ({ n: 1 }))
  const other = docChild('paced', path, '1')
  const theirs = (await other.expect('version ')).split(' ')[1]
  other.send('next')
  assert.equal(await other.line(), 'done')
  await assert.rejects(doc.updateIf(seen.version, () => ({ n: 100 })), (e) => e.code === 'CONFLICT' && e.message.includes(theirs))
  assert.deepEqual(doc.read().value, { n: 2 })
  assert.deepEqual((await doc.updateIf(theirs, (d) => ({ n: d.n + 1 }))).value, { n: 3 })
})

test('Document: an aborted signal cancels the wait for a held lease', async (t) => {
  const path = join(tempDir(t), 'count.json')
  const doc = Document.open(path)
  let release
  const held = doc.update(() => new Promise((resolve) => { release = resolve }))
  while (release === undefined) await new Promise((resolve) => setImmediate(resolve))
  await assert.rejects(doc.update(() => ({ n: 9 }), { timeoutMs: 0 }), { code: 'CONTENDED' })
  await assert.rejects(doc.update(() => ({ n: 9 }), { signal: AbortSignal.abort() }), { code: 'CANCELLED' })
  const ac = new AbortController()
  const waiting = doc.update(() => ({ n: 9 }), { signal: ac.signal })
  ac.abort()
  await assert.rejects(waiting, { code: 'CANCELLED' })
  release({ n: 1 })
  assert.deepEqual((await held).value, { n: 1 })
})

test('Document: watch sees every version another process writes, and stops', async (t) => {
  const path = join(tempDir(t), 'count.json')
  const doc = Document.open(path)
  const seen = []
  let wake
  const unsubscribe = doc.watch((v) => { seen.push(v); if (wake) wake() })
  const next = () => new Promise((resolve) => {
    if (seen.length) return resolve(seen.shift())
    wake = () => { wake = undefined; resolve(seen.shift()) }
  })
  const other = docChild('paced', path, '20')
  for (let i = 1; i <= 20; i++) {
    const version = (await other.expect('version ')).split(' ')[1]
    const got = await next()
    assert.equal(got.version, version)
    assert.deepEqual(got.value, { n: i })
    other.send('next')
  }
  assert.equal(await other.line(), 'done')
  unsubscribe()
})

test('Document: a watch does not keep the process alive', async (t) => {
  const dir = tempDir(t)
  const code = `const { Document } = require(${JSON.stringify(PKG)}); Document.open(${JSON.stringify(join(dir, 'x.json'))}).watch(() => {}); console.log('watching')`
  const child = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] })
  let outText = ''
  child.stdout.on('data', (d) => { outText += d })
  const exit = await new Promise((resolve) => child.on('exit', (c) => resolve(c)))
  assert.equal(exit, 0)
  assert.equal(outText.trim(), 'watching')
})

test('Document: a document that does not parse is refused and left as it is; a symlink is refused', async (t) => {
  const dir = tempDir(t)
  const path = join(dir, 'settings.json')
  fs.writeFileSync(path, '{ torn')
  const doc = Document.open(path)
  await assert.rejects(doc.update(() => ({})), (e) => e.code === 'INVALID_INPUT' && e.message.includes('settings.json'))
  assert.throws(() => doc.read(), { code: 'INVALID_INPUT' })
  assert.equal(fs.readFileSync(path, 'utf8'), '{ torn')
  fs.writeFileSync(join(dir, 'target.json'), '{}')
  fs.symlinkSync(join(dir, 'target.json'), join(dir, 'link.json'))
  const link = Document.open(join(dir, 'link.json'))
  assert.throws(() => link.read(), (e) => e.code === 'INVALID_INPUT' && e.message.includes('link.json'))
  await assert.rejects(link.update(() => ({ x: 1 })), { code: 'INVALID_INPUT' })
  assert.equal(fs.readFileSync(join(dir, 'target.json'), 'utf8'), '{}')
  assert.throws(() => Document.open(path, { encoding: 'yaml' }), { code: 'INVALID_INPUT' })
})

test('Document: utf8 and buffer encodings, and a lock path of its own', async (t) => {
  const dir = tempDir(t)
  const text = Document.open(join(dir, 'notes.txt'), { encoding: 'utf8' })
  assert.equal((await text.update((s) => (s ?? '') + 'héllo')).value, 'héllo')
  assert.equal(text.read().value, 'héllo')
  const raw = Document.open(join(dir, 'blob'), { encoding: 'buffer', lockPath: join(dir, 'my.lock') })
  await raw.update(() => Buffer.from([0, 1]))
  assert.deepEqual([...raw.read().value], [0, 1])
  assert.ok(fs.existsSync(join(dir, 'my.lock')))
})

test('Document: Node and the CLI mixed on one document lose none', async (t) => {
  if (CLI === null) return skip(t, 'Document mixed with the CLI', 'the leasehold CLI is not built in this target dir')
  const path = join(tempDir(t), 'count.json')
  // The CLI's increment of {"n": N}: COMMAND keeps the document's digits and adds one.
  const loop = `echo ready; read _go; i=0; while [ $i -lt ${INCREMENTS} ]; do "$CLI" doc update --timeout 60 "$F" -- sh -c 'n=$(tr -dc 0-9); echo "{\\"n\\": $((\${n:-0} + 1))}"' >/dev/null || exit 1; i=$((i+1)); done; echo done`
  const workers = [
    docChild('increment', path, String(INCREMENTS)),
    docChild('increment', path, String(INCREMENTS)),
    new Child('sh', ['-c', loop], { env: { ...process.env, CLI, F: path } }),
    new Child('sh', ['-c', loop], { env: { ...process.env, CLI, F: path } })
  ]
  for (const w of workers) await w.expect('ready')
  for (const w of workers) w.send('go')
  for (const w of workers) {
    await w.expect('done')
    assert.equal((await w.exited).code, 0)
  }
  assert.deepEqual(Document.open(path).read().value, { n: 4 * INCREMENTS })
})
