// Types of the npm package `leasehold-lock` (its contract: README.md). Semantics are the Rust
// library's and the CLI contract's: the same lock files, safe open, inode verification,
// fairness, ownership rule and fail-closed authority; a Node process and a `leasehold` CLI
// process exclude each other on the same path.

/** The stable codes of every failure (`Error.code`); each names one kind of failure. */
export type LeaseholdErrorCode =
  | 'CONTENDED'
  | 'CANCELLED'
  | 'LOST'
  | 'INVALID_INPUT'
  | 'NOT_FOUND'
  | 'NOT_AUTHORITY'
  | 'SESSION_OWNED'
  | 'UNTRUSTED'
  | 'NETWORK_FS'
  | 'UNSUPPORTED'
  | 'STORAGE_FAILED'
  | 'CONFLICT'
  | 'IO'

/**
 * Every rejection and every throw of this package, but an aborted wait's: `instanceof
 * LeaseholdError` tells them from other errors. A wait ended by its `signal` rejects with
 * `signal.reason` instead (an `AbortError` DOMException, or a `TimeoutError` for
 * `AbortSignal.timeout`), on which `code` is `'CANCELLED'`.
 */
export declare class LeaseholdError extends Error {
  constructor(message: string, code: LeaseholdErrorCode, pids?: number[])
  readonly name: 'LeaseholdError'
  readonly code: LeaseholdErrorCode
  /** The holders' pids, present when the OS revealed them. */
  readonly pids?: number[]
}

/**
 * What the package needs of an `AbortSignal` (any standard one is one): written out so that
 * these types check without the DOM library or `@types/node`.
 */
export interface AbortSignalLike {
  readonly aborted: boolean
  readonly reason: any
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void
  removeEventListener(type: 'abort', listener: () => void): void
}

// `Symbol.dispose` (TypeScript's esnext.disposable library and @types/node declare it too;
// this lets the types check without either).
declare global {
  interface SymbolConstructor {
    readonly dispose: unique symbol
  }
}

export interface LeaseOptions {
  /** Absent or Infinity: wait without limit; 0: try once. A wait that runs out rejects with CONTENDED. */
  timeoutMs?: number
  /** Abort ends the wait promptly: rejects with `signal.reason` (code CANCELLED), and nothing is held. */
  signal?: AbortSignalLike
  /** A shared (reader) lease; exclusive waiters are not starved. */
  shared?: boolean
  /** Accept lock files on network and FUSE file systems (LEASEHOLD_ALLOW_NETWORK_FS). */
  allowNetworkFs?: boolean
  /** Accept state other users own or may write (LEASEHOLD_ALLOW_SHARED). */
  allowSharedState?: boolean
  /**
   * What an exclusive lease does on a mount whose kernel locks stay on each host (NFS with
   * local_lock=all or nolock, SMB with nobrl, sshfs and most FUSE), where two hosts would both
   * get the kernel's lock: 'refuse' (the default, NETWORK_FS) or take a record lease with this
   * TTL in milliseconds, which excludes processes on every host sharing the directory and
   * carries a fencing token (LEASEHOLD_SHARED_MOUNT=record:SECS). Elsewhere (a local disk, a
   * mount whose locks cross hosts, a shared lease) the kernel's lease is taken as without it.
   */
  onSharedMount?: SharedMount
}

/** See LeaseOptions.onSharedMount. */
export type SharedMount = 'refuse' | { record: { ttlMs: number } }

/**
 * A kernel lease on a lock file (Windows: a named kernel semaphore). Held until release(),
 * Symbol.dispose, garbage collection of the object, or the death of the process; never by
 * a TTL. With onSharedMount's record lease on a mount whose locks stay on each host, a record
 * lease instead: renewed by a thread of its own, it ends a TTL after its holder stopped
 * renewing (at once for a successor on this host once the holder died).
 */
export declare class Lease {
  private constructor()
  /**
   * Waits within the options, never blocking the event loop (no libuv pool thread, no thread
   * per waiter; a record lease's wait across hosts, which polls, takes a thread of the addon's
   * own pool while it lasts).
   */
  static acquire(path: string, options?: LeaseOptions): Promise<Lease>
  /** The lease if it is free right now, else null (synchronous). */
  static tryAcquire(path: string, options?: Omit<LeaseOptions, 'timeoutMs' | 'signal'>): Lease | null
  readonly path: string
  readonly shared: boolean
  /**
   * A record lease's fencing token, which grows with every grant; null for a kernel lease. It
   * is `T·2^20 + k`: `T` the server's grant, `k` the hand-overs on one host since; compare
   * tokens as numbers only.
   */
  readonly fencingToken: number | null
  /**
   * Throws LOST when the lock file was removed or replaced (or after release); for a record
   * lease, when its validity ran out and the record was taken over (it reads the record once
   * a third of the TTL is spent). Call it before each write the lease guards.
   */
  verify(): void
  /** Idempotent. */
  release(): void
  [Symbol.dispose](): void
}

export type HoldersAnswer = { state: 'free' } | { state: 'held'; pids: number[] } | { state: 'unknown' }

/** Who holds the lock at `path`; never takes, creates or disturbs a lock. */
export declare function holders(path: string): HoldersAnswer

export type RegistryState = 'active' | 'contended' | 'storage-failed'

export interface RegistryOpenOptions {
  home: string
  /** Default: HOME/storages/multi_root_workspace.lock. */
  leasePath?: string
  /** How long to wait for the authority; absent or 0: try once (the CLI's default). */
  timeoutMs?: number
  signal?: AbortSignalLike
  /** As LeaseOptions.allowNetworkFs. */
  allowNetworkFs?: boolean
  /** As LeaseOptions.allowSharedState: the lock file, the storages directory and the document too. */
  allowSharedState?: boolean
  /**
   * As LeaseOptions.onSharedMount, for the authority's lease: with a record lease, each write
   * of the registry is fenced (refused when too little of the lease's validity is left, or
   * when a newer holder's token is in the fence beside the lock file).
   */
  onSharedMount?: SharedMount
}

/** The opt-ins of a store's `open`, as for a lease (LeaseOptions). */
export interface StoreOptIns {
  /** As LeaseOptions.allowNetworkFs. */
  allowNetworkFs?: boolean
  /** As LeaseOptions.allowSharedState: the store's directories and files too. */
  allowSharedState?: boolean
}

/** The store-wide authority over the multi-root workspace registry. */
export declare class Registry {
  private constructor()
  /** Contention is a state, not a rejection. */
  static open(options: RegistryOpenOptions): Promise<Registry>
  readonly state: RegistryState
  /** {} unless active (fail closed). */
  scope(): Record<string, string[]>
  /** false unless active. */
  grants(primary: string, path: string): boolean
  /** NOT_AUTHORITY unless active; INVALID_INPUT for a root that is not an existing directory. */
  add(primary: string, root: string): Promise<void>
  remove(primary: string, root: string): Promise<void>
  /** Takes over once the holder is gone. */
  refresh(): Promise<RegistryState>
  /** Drains in-flight mutations, closes the store, releases the lease. */
  close(): Promise<void>
}

/** One writer per append-only JSON-lines session log. */
export declare class SessionLog {
  private constructor()
  /** Takes no lease yet; INVALID_INPUT for an unsafe ID. */
  /**
   * onSharedMount: as LeaseOptions.onSharedMount, for the write lease; with a record lease,
   * each append is fenced (refused when too little of the lease's validity is left, or when
   * a newer holder's token is in `session.lock.fence`).
   */
  static open(dir: string, id: string, options?: StoreOptIns & { onSharedMount?: SharedMount }): SessionLog
  /**
   * Takes the write lease lazily; SESSION_OWNED when another has it. Appends run in call
   * order. A record with no JSON text (undefined, a function, a symbol) is INVALID_INPUT.
   */
  append(record: unknown): Promise<void>
  close(): void
  /** Never takes the lock; whole records only. NOT_FOUND for a session that does not exist. */
  static read(dir: string, id: string, options?: StoreOptIns): unknown[]
}

/** Isolated results, each operation under its ID's lease. */
export declare class ResultStore {
  private constructor()
  /** timeoutMs: the wait for an ID's lease (default 30000, as the CLI). */
  static open(root: string, options?: { timeoutMs?: number } & StoreOptIns & { onSharedMount?: SharedMount }): ResultStore
  stage(id: string, from: string): Promise<void>
  paths(id: string): Promise<string[]>
  finish(id: string): Promise<void>
  apply(id: string, to: string): Promise<void>
  discard(id: string): Promise<void>
  abort(id: string): Promise<void>
  pending(): Promise<string[]>
  /** Resolves to the number of results removed. */
  sweep(olderThanSec: number): Promise<number>
  gc(options?: { olderThanSec?: number }): Promise<{ removed: number; kept: number }>
}

/** How a Document's bytes are seen: parsed JSON (the default), a UTF-8 string, or a Buffer. */
export type DocumentEncoding = 'json' | 'utf8' | 'buffer'

export interface DocumentOpenOptions {
  /** The lock file writers lease; default `FILE.lock` beside the file. Every writer must use the same. */
  lockPath?: string
  /**
   * 'json' (default): a document that does not parse is never handed to an update nor
   * overwritten (INVALID_INPUT), and a value with no JSON text is refused.
   */
  encoding?: DocumentEncoding
  /** Accept a lock file another user owns or may write (LEASEHOLD_ALLOW_SHARED). */
  allowSharedState?: boolean
  /**
   * As LeaseOptions.onSharedMount, for an update's lease: with a record lease, every write is
   * fenced (refused when too little of the lease's validity is left, or when a newer holder's
   * token is in `<lock>.fence`), so a writer paused past its TTL writes nothing.
   */
  onSharedMount?: SharedMount
}

export interface DocumentUpdateOptions {
  /** How long to wait for the document's lease; absent or Infinity: without limit; 0: try once (CONTENDED). */
  timeoutMs?: number
  /** Abort ends the wait for the lease promptly (`signal.reason`, code CANCELLED); nothing is written. */
  signal?: AbortSignalLike
}

/** One whole version: its decoded value and its version (32 hex digits, a digest of the bytes). */
export interface DocumentVersion<T> {
  value: T
  version: string
}

/**
 * A file of your own that several processes (in any language leasehold has) read and
 * update without losing a change: each update runs under the document's lease on the content
 * read under it, and is written durably (temporary, fsync, rename, directory fsync).
 */
export declare class Document<T = any> {
  private constructor()
  static open<T = any>(path: string, options?: DocumentOpenOptions): Document<T>
  readonly path: string
  readonly lockPath: string
  readonly encoding: DocumentEncoding
  /** The current version, or null without a document. Takes no lock (synchronous). */
  read(): DocumentVersion<T> | null
  /**
   * Replaces the value with what `fn` returns (undefined: `current`, changed in place), under
   * the lease, which is held while `fn` (possibly async) runs; `current` is undefined without
   * a document. A throw or rejection of `fn` writes nothing.
   */
  update(fn: (current: T | undefined) => T | undefined | Promise<T | undefined>, options?: DocumentUpdateOptions): Promise<DocumentVersion<T>>
  /** update() only if the document is still at `version`; otherwise rejects with CONFLICT, writing nothing. */
  updateIf(version: string, fn: (current: T | undefined) => T | undefined | Promise<T | undefined>, options?: DocumentUpdateOptions): Promise<DocumentVersion<T>>
  /**
   * Calls `listener` for each new version (versions written faster than they are read may
   * be coalesced; never an older one after a newer one). Never keeps the process alive.
   * Returns the function that stops it.
   */
  watch(listener: (version: DocumentVersion<T>) => void, options?: { onError?: (e: LeaseholdError) => void }): () => void
}
