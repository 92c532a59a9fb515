'use strict'
// index.d.ts types the whole surface, and type-checks as its users' compilers see it:
// `tsc --strict` of the current TypeScript and of 5.x, with @types/node, with the DOM
// library instead, and with neither (es2022 alone: index.d.ts itself). The compilers are
// installed from npm at test time into node_modules/.cache (kept between runs); where npm
// cannot get one, its checks print `SKIP: tsc <version>: <why>`.
const test = require('node:test')
const assert = require('node:assert/strict')
const { join } = require('node:path')
const fs = require('node:fs')
const { tmpdir } = require('node:os')
const { execFileSync } = require('node:child_process')
const { skip } = require('./helpers')

const HERE = join(__dirname, '..')
const CACHE = join(HERE, 'node_modules', '.cache', 'leasehold-tsc')

/** The TypeScript releases checked: npm's current one and the newest 5.x. */
const COMPILERS = [
  { name: 'current', spec: 'typescript@latest' },
  { name: '5.x', spec: 'typescript@5' }
]

/** A prefix with `spec` and @types/node installed (once), or why it cannot be had. */
function install (name, spec) {
  const prefix = join(CACHE, name)
  const tsc = join(prefix, 'node_modules', 'typescript', 'bin', 'tsc')
  if (fs.existsSync(tsc) && fs.existsSync(join(prefix, 'node_modules', '@types', 'node'))) return { prefix, tsc }
  fs.mkdirSync(prefix, { recursive: true })
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm'
  try {
    execFileSync(npm, ['install', '--no-audit', '--no-fund', '--no-save', '--prefix', prefix, spec, '@types/node@20'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 300000 })
  } catch (e) {
    const why = String(e.stderr || e.message).trim().split('\n').filter(Boolean).pop()
    return { why: `npm install ${spec} @types/node failed (is the registry reachable?): ${why}` }
  }
  return fs.existsSync(tsc) ? { prefix, tsc } : { why: `npm install ${spec} left no ${tsc}` }
}

/** The environments a user's program may compile in, each with the program it checks. */
function environments (prefix) {
  const usage = join(__dirname, 'usage.ts')
  const plf = join(__dirname, 'usage-proper-lockfile.ts')
  const common = { strict: true, noEmit: true, target: 'es2022', module: 'nodenext', skipLibCheck: false }
  return [
    { what: 'with @types/node', options: { ...common, lib: ['es2022'], types: ['node'], typeRoots: [join(prefix, 'node_modules', '@types')] }, files: [usage, plf] },
    { what: 'without @types/node (the DOM library)', options: { ...common, lib: ['es2022', 'dom'], types: [] }, files: [usage, plf] },
    { what: 'without @types/node or the DOM library', options: { ...common, lib: ['es2022'], types: [] }, files: [join(HERE, 'index.d.ts'), join(HERE, 'proper-lockfile.d.ts')] }
  ]
}

for (const { name, spec } of COMPILERS) {
  test(`index.d.ts: tsc --strict of TypeScript ${name}, with and without @types/node`, (t) => {
    const got = install(name, spec)
    if (got.why) return skip(t, `tsc ${name}`, got.why)
    const version = JSON.parse(fs.readFileSync(join(got.prefix, 'node_modules', 'typescript', 'package.json'), 'utf8')).version
    console.log(`TypeScript ${name}: ${version}`)
    if (name === '5.x') assert.match(version, /^5\./)
    const dir = fs.mkdtempSync(join(tmpdir(), 'leasehold-tsc-'))
    t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
    for (const [i, env] of environments(got.prefix).entries()) {
      const config = join(dir, `tsconfig.${i}.json`)
      fs.writeFileSync(config, JSON.stringify({ compilerOptions: env.options, files: env.files }))
      try {
        execFileSync(process.execPath, [got.tsc, '-p', config], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
      } catch (e) {
        assert.fail(`TypeScript ${version}, ${env.what}: tsc found type errors:\n${e.stdout}${e.stderr}`)
      }
    }
  })
}
