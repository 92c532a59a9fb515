// Types of `leasehold-lock/proper-lockfile` (its contract: README.md, "Switching from
// proper-lockfile"): proper-lockfile 4's API over leasehold's kernel leases. The lock is a
// lease on the sibling lock file `<file>.lock` (or `lockfilePath`), never on the file itself.

/** The `retry` package's options, as proper-lockfile takes them for `retries`. */
export interface RetryOptions {
  /** Default 10. */
  retries?: number
  /** Default 2. */
  factor?: number
  /** ms; default 1000. */
  minTimeout?: number
  /** ms; default Infinity. */
  maxTimeout?: number
  /** Counted at its upper bound (each delay doubled). */
  randomize?: boolean
  /** Wait without limit. */
  forever?: boolean
  /** ms; no retry after it. */
  maxRetryTime?: number
  /** Accepted; the wait never keeps the process alive past its promise anyway. */
  unref?: boolean
}

/**
 * The codes proper-lockfile's errors have, as this module reports them. Other failures keep
 * their own code: Node's for the file (ENOENT from realpath), leasehold's for the lock file
 * (INVALID_INPUT, UNTRUSTED, NETWORK_FS, IO, ...).
 */
export type ProperLockfileErrorCode = 'ELOCKED' | 'ENOTACQUIRED' | 'ERELEASED' | 'ECOMPROMISED' | 'ESYNC'

/** A rejection or throw of this module. */
export interface ProperLockfileError extends Error {
  code: ProperLockfileErrorCode | string
  /** The canonical path of the file (ELOCKED, ECOMPROMISED). */
  file?: string
  /** The holders' pids, present when the OS revealed them (ELOCKED). */
  pids?: number[]
}

export interface LockOptions {
  /** Accepted and unneeded: a lease is never stale while its holder lives, and is freed when it dies. */
  stale?: number
  /** How often the lease is verified for `onCompromised` (ms; proper-lockfile's bounds: default stale/2, 1000 to stale/2). */
  update?: number
  /** A number of retries, `retry` options or an array of delays: lock() waits at most as long as those retries would. */
  retries?: number | RetryOptions | number[]
  /** Resolve symlinks (default true; the file must then exist). */
  realpath?: boolean
  /** Accepted and unused: the lease is taken by the library, not through `fs`. */
  fs?: unknown
  /** Called with an ECOMPROMISED error when a verification finds the lock file removed or replaced; default: throws it. */
  onCompromised?: (err: ProperLockfileError) => unknown
  /** The lock file; default `<file>.lock` (after realpath). */
  lockfilePath?: string
  /** Accept a lock file on a network or FUSE file system (LEASEHOLD_ALLOW_NETWORK_FS). */
  allowNetworkFs?: boolean
  /** Accept a lock file another user owns or may write (LEASEHOLD_ALLOW_SHARED). */
  allowSharedState?: boolean
}

export interface UnlockOptions {
  realpath?: boolean
  fs?: unknown
  lockfilePath?: string
}

export interface CheckOptions {
  /** Accepted and unneeded (see LockOptions.stale). */
  stale?: number
  realpath?: boolean
  fs?: unknown
  lockfilePath?: string
  allowNetworkFs?: boolean
  allowSharedState?: boolean
}

/** Takes the lock, waiting as `retries` allows; rejects ELOCKED when it stays held. Resolves to `release`. */
export declare function lock(file: string, options?: LockOptions): Promise<() => Promise<void>>
/** Releases this process's lock of `file`; rejects ENOTACQUIRED when this process does not hold it. */
export declare function unlock(file: string, options?: UnlockOptions): Promise<void>
/** Whether any process (this one included) holds the lock now. Creates nothing. */
export declare function check(file: string, options?: CheckOptions): Promise<boolean>
/** lock() trying once (retries throw ESYNC); returns a synchronous `release`. */
export declare function lockSync(file: string, options?: LockOptions): () => void
export declare function unlockSync(file: string, options?: UnlockOptions): void
export declare function checkSync(file: string, options?: CheckOptions): boolean
/** How long lock() waits for these `retries`, in ms (Infinity: without limit). */
export declare function retryBudgetMs(retries: LockOptions['retries']): number
