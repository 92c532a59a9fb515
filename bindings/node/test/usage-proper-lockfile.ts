// Type-checked by types.test.js with `tsc --noEmit --strict`: leasehold-lock/proper-lockfile
// used as a TypeScript program on proper-lockfile would use it (nothing here runs).
import * as lockfile from '../proper-lockfile'
import { lock, unlock, check, lockSync, unlockSync, checkSync, retryBudgetMs, type LockOptions, type ProperLockfileError } from '../proper-lockfile'

export async function usage (file: string): Promise<void> {
  const options: LockOptions = {
    stale: 10000,
    update: 5000,
    retries: { retries: 5, factor: 2, minTimeout: 100, maxTimeout: 1000, randomize: true, maxRetryTime: 3000 },
    realpath: false,
    lockfilePath: `${file}.lock`,
    onCompromised: (err: ProperLockfileError) => { console.error(err.code, err.file) },
    allowNetworkFs: false,
    allowSharedState: false
  }
  const release: () => Promise<void> = await lock(file, options)
  await release()
  await lockfile.lock(file, { retries: 3 })
  await lockfile.lock(file, { retries: [10, 20] })
  await unlock(file, { realpath: false, lockfilePath: `${file}.lock` })
  const locked: boolean = await check(file, { stale: 5000 })
  const releaseSync: () => void = lockSync(file)
  releaseSync()
  unlockSync(file)
  const held: boolean = checkSync(file)
  const ms: number = retryBudgetMs({ forever: true })
  try {
    await lock(file)
  } catch (e) {
    const err = e as ProperLockfileError
    if (err.code === 'ELOCKED') console.log(err.pids, locked, held, ms)
  }
}
