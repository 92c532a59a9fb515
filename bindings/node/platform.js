'use strict'
// The names of the native addon for this platform, most specific first (napi-rs's
// per-platform pattern: `leasehold.<platform>-<arch>[-<abi>].node`). One list, used by the
// loader (index.js), by build.js and by the Rust integration test.

function isMusl () {
  try {
    const report = process.report && process.report.getReport()
    const header = report && (typeof report === 'string' ? JSON.parse(report) : report).header
    return !(header && header.glibcVersionRuntime)
  } catch {
    return false
  }
}

function addonNames () {
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
  return names.map((n) => `leasehold.${n}.node`)
}

module.exports = { addonNames }
