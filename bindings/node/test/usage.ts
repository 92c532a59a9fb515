// Type-checked by types.test.js with `tsc --noEmit --strict`: every part of the surface
// used as a TypeScript program would use it (nothing here runs).
import { Lease, holders, Registry, SessionLog, ResultStore, Document, LeaseholdError, type LeaseholdErrorCode, type AbortSignalLike, type HoldersAnswer, type RegistryState, type DocumentVersion, type SharedMount } from '..'

export async function usage (dir: string): Promise<void> {
  const ac = new AbortController()
  const lease: Lease = await Lease.acquire(`${dir}/a.lock`, { timeoutMs: 100, signal: ac.signal, shared: false, allowNetworkFs: false, allowSharedState: false })
  const path: string = lease.path
  const shared: boolean = lease.shared
  lease.verify()
  lease.release()
  lease[Symbol.dispose]()
  const maybe: Lease | null = Lease.tryAcquire(path, { shared })
  maybe?.release()
  const onSharedMount: SharedMount = { record: { ttlMs: 10000 } }
  const fenced = await Lease.acquire(path, { onSharedMount, timeoutMs: 100 })
  const token: number | null = fenced.fencingToken
  void token
  Lease.tryAcquire(path, { onSharedMount: 'refuse' })?.release()
  const h: HoldersAnswer = holders(path)
  if (h.state === 'held') {
    const pids: number[] = h.pids
    void pids
  }
  try {
    await Lease.acquire(path, { timeoutMs: 0 })
  } catch (e) {
    if (e instanceof LeaseholdError) {
      const code: LeaseholdErrorCode = e.code
      const pids: number[] | undefined = e.pids
      const message: string = e.message
      void code; void pids; void message
    }
  }
  const made: Error = new LeaseholdError('refused', 'NOT_FOUND', [1])
  const signal: AbortSignalLike = AbortSignal.timeout(1000)
  try {
    await Lease.acquire(path, { signal })
  } catch (e) {
    // An aborted wait rejects with signal.reason, which carries code CANCELLED.
    if (e === signal.reason) void (e as { code?: LeaseholdErrorCode }).code
  }
  void made

  const reg = await Registry.open({ home: dir, leasePath: `${dir}/r.lock`, timeoutMs: 0, signal: ac.signal, onSharedMount })
  const state: RegistryState = reg.state
  const scope: Record<string, string[]> = reg.scope()
  const granted: boolean = reg.grants(dir, `${dir}/x`)
  await reg.add(dir, dir)
  await reg.remove(dir, dir)
  const next: 'active' | 'contended' | 'storage-failed' = await reg.refresh()
  await reg.close()
  void state; void scope; void granted; void next

  const log = SessionLog.open(dir, 'session-1', { allowSharedState: false, onSharedMount: 'refuse' })
  await log.append({ any: ['json', 1, null] })
  log.close()
  const records: unknown[] = SessionLog.read(dir, 'session-1')
  void records

  const results = ResultStore.open(dir, { timeoutMs: 1000 })
  await results.stage('id', dir)
  const paths: string[] = await results.paths('id')
  await results.finish('id')
  await results.apply('id', dir)
  await results.discard('id')
  await results.abort('id')
  const pending: string[] = await results.pending()
  const removed: number = await results.sweep(60)
  const gc: { removed: number; kept: number } = await results.gc({ olderThanSec: 0 })
  await results.gc()
  void paths; void pending; void removed; void gc

  const doc = Document.open<{ count: number }>(`${dir}/settings.json`, { lockPath: `${dir}/s.lock`, encoding: 'json', allowSharedState: false })
  const now: DocumentVersion<{ count: number }> | null = doc.read()
  const bumped = await doc.update(async (cur) => ({ count: (cur?.count ?? 0) + 1 }), { timeoutMs: 1000, signal: ac.signal })
  const count: number = bumped.value.count
  await doc.updateIf(bumped.version, (cur) => { if (cur) cur.count += 1; return undefined })
  const unsubscribe: () => void = doc.watch((v) => { const c: number = v.value.count; void c }, { onError: (e) => { void e.code } })
  unsubscribe()
  const text = Document.open<string>(`${dir}/notes.txt`, { encoding: 'utf8', onSharedMount: { record: { ttlMs: 5000 } } })
  const words: string | undefined = text.read()?.value
  void now; void count; void words
}

// Misuse does not type-check.
// @ts-expect-error: timeoutMs is not an option of tryAcquire
Lease.tryAcquire('x.lock', { timeoutMs: 5 })
// @ts-expect-error: a record lease's TTL is in ttlMs
Lease.tryAcquire('x.lock', { onSharedMount: { record: { ttl: 5 } } })
// @ts-expect-error: a Document's record lease's TTL is in ttlMs too
Document.open('x.json', { onSharedMount: { record: { ttl: 5 } } })
// @ts-expect-error: the constructor is private
void new Lease()
// @ts-expect-error: not an encoding
Document.open('x.json', { encoding: 'yaml' })
