'use strict'
// Copies the addon cargo built (`cargo build [--release] -p leasehold-node`) next to
// index.js under the name the loader looks for: `node build.js [--release]`.
const { copyFileSync } = require('node:fs')
const { join } = require('node:path')
const { addonNames } = require('./platform')

const profile = process.argv.includes('--release') ? 'release' : 'debug'
const lib = { win32: 'leasehold_node.dll', darwin: 'libleasehold_node.dylib' }[process.platform] || 'libleasehold_node.so'
const target = process.env.CARGO_TARGET_DIR || join(__dirname, '..', '..', 'target')
const from = join(target, profile, lib)
const to = join(__dirname, addonNames()[0])
copyFileSync(from, to)
console.log(`${from} -> ${to}`)
