// Runs one wasm32-wasip1 program (a Rust test binary) under Node's built-in WASI.
//
//   node --experimental-wasi-unstable-preview1 .ci/wasi-run.mjs FILE.wasm [ARGS...]
//
// (Node 18 needs the flag; Node 20 accepts it and needs none.)
//
// Also works as cargo's runner (CARGO_TARGET_WASM32_WASIP1_RUNNER="node .ci/wasi-run.mjs"),
// which passes the .wasm path first and the test harness's arguments after it.
//
// The program sees a fresh temporary directory preopened at /tmp (TMPDIR=/tmp: WASI has no
// system temporary directory, and the tests make theirs there), the arguments after FILE,
// and the environment variables RUST_BACKTRACE and RUST_TEST_* / LEASEHOLD_* of this process.
// The directory is removed afterwards. The exit status is the program's; a trap (a Rust
// panic aborts on wasm: a failing test ends the binary) exits 101, like a failed native test.
import { WASI } from 'node:wasi';
import { readFile } from 'node:fs/promises';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import process from 'node:process';

const [file, ...args] = process.argv.slice(2);
if (!file) {
  console.error('usage: node .ci/wasi-run.mjs FILE.wasm [ARGS...]');
  process.exit(2);
}
const scratch = mkdtempSync(join(tmpdir(), 'leasehold-wasi-'));
const env = { TMPDIR: '/tmp' };
for (const [k, v] of Object.entries(process.env)) {
  if (k === 'RUST_BACKTRACE' || k.startsWith('RUST_TEST_') || k.startsWith('LEASEHOLD_')) {
    env[k] = v;
  }
}
let status;
try {
  const wasi = new WASI({
    version: 'preview1',
    args: [file, ...args],
    env,
    preopens: { '/tmp': scratch },
    returnOnExit: true,
  });
  const module = await WebAssembly.compile(await readFile(file));
  // getImportObject() is Node 20's; Node 18 (Debian 12) has only wasiImport.
  const imports = typeof wasi.getImportObject === 'function'
    ? wasi.getImportObject()
    : { wasi_snapshot_preview1: wasi.wasiImport };
  const instance = await WebAssembly.instantiate(module, imports);
  status = wasi.start(instance);
} catch (e) {
  console.error(`wasi-run: ${file}: ${e && e.message ? e.message : e}`);
  status = 101;
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
process.exit(status);
