'use strict'
// The names of the native addon for this platform, most specific first (napi-rs's
// per-platform pattern): the platform `<platform>-<arch>[-<abi>]`, the addon file
// `leasehold.<platform>.node` and the npm package `leasehold-lock-<platform>` that carries it
// (an optional dependency of leasehold-lock; `cargo xtask dist` makes one per release
// target). One list, used by the loader (index.js), by build.js and by the Rust integration
// test.

function isMusl () {
  try {
    const report = process.report && process.report.getReport()
    const header = report && (typeof report === 'string' ? JSON.parse(report) : report).header
    return !(header && header.glibcVersionRuntime)
  } catch {
    return false
  }
}

function platforms () {
  const { platform, arch } = process
  const names = []
  if (platform === 'linux') {
    names.push(`linux-${arch}-${isMusl() ? 'musl' : 'gnu'}`)
  } else if (platform === 'win32') {
    names.push(`win32-${arch}-msvc`, `win32-${arch}-gnu`)
  } else if (platform === 'darwin') {
    names.push(`darwin-${arch}`, 'darwin-universal')
  } else if (platform === 'freebsd') {
    names.push(`freebsd-${arch}`)
  }
  return names
}

/** The addon's file names, for a build beside index.js (build.js). */
function addonNames () {
  return platforms().map((p) => `leasehold.${p}.node`)
}

/** The npm packages that carry the addon for this platform. */
function packageNames () {
  return platforms().map((p) => `leasehold-lock-${p}`)
}

module.exports = { platforms, addonNames, packageNames }
