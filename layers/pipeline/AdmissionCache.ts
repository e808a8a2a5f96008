// AdmissionCache: admission's snapshot (candidates, settings, limits, budget, holds, wallet) kept
// in memory per platform, end user and model for GATEWAY_ADMISSION_CACHE_TTL (default 1 s), so
// most calls are admitted without a database round trip. Costs queued here since the snapshot
// are added from Settlements' running totals, so this instance's own calls count at once and
// exactly. Writes through this instance's API drop the platform's entries when they answer;
// writes on other instances are seen within the TTL. A TTL of 0 reads on every call.
import { BigDecimal, Deferred, Effect, Exit, FiberId, Layer } from "effect"
import { durationMsConfig } from "../lib/ConfigValues.js"
import type { AdmissionSnapshot } from "./AdmissionSnapshot.js"

export interface CachedAdmission {
  readonly snapshot: AdmissionSnapshot
  readonly loadedAt: number
  /** Queued costs the snapshot did not include when it was read. */
  readonly unsettled: { readonly budget: BigDecimal.BigDecimal; readonly wallet: BigDecimal.BigDecimal }
  /** Settlements' running totals when it was read. */
  readonly totals: { readonly budget: BigDecimal.BigDecimal; readonly wallet: BigDecimal.BigDecimal }
}

/** How long a snapshot is reused; 0 reads on every call. */
export const admissionCacheTtlMs = durationMsConfig("GATEWAY_ADMISSION_CACHE_TTL", 1_000)

const NOTHING = { budget: BigDecimal.make(0n, 0), wallet: BigDecimal.make(0n, 0) }

const keyOf = (platformId: string, endUserId: string | null, model: string) => `${platformId}\u0000${endUserId ?? ""}\u0000${model}`

export class AdmissionCache extends Effect.Service<AdmissionCache>()("gateway/AdmissionCache", {
  scoped: Effect.gen(function*() {
    const scope = yield* Effect.scope
    const ttlMs = yield* admissionCacheTtlMs.pipe(Effect.orDie)
    /** platform id -> its entries by key (dropping a platform is one delete). */
    const entries = new Map<string, Map<string, CachedAdmission>>()

    const get = (platformId: string, endUserId: string | null, model: string, now: number) => {
      const entry = entries.get(platformId)?.get(keyOf(platformId, endUserId, model))
      return entry !== undefined && now - entry.loadedAt < ttlMs ? entry : undefined
    }

    const set = (platformId: string, endUserId: string | null, model: string, entry: CachedAdmission) => {
      if (ttlMs <= 0) return
      let forPlatform = entries.get(platformId)
      if (forPlatform === undefined) entries.set(platformId, forPlatform = new Map())
      // Bounded: expired entries go when the platform's map grows past a few thousand.
      if (forPlatform.size > 4096) {
        for (const [key, old] of forPlatform) if (entry.loadedAt - old.loadedAt >= ttlMs) forPlatform.delete(key)
      }
      forPlatform.set(keyOf(platformId, endUserId, model), entry)
    }

    /**
     * Loads in flight by key: concurrent misses of one key share one read (no stampede at expiry).
     * The read runs in a fiber of the cache's own: a caller that goes away (its client hung up)
     * only stops waiting. Run in the first caller's fiber, its interruption reached every caller
     * waiting for the same read, and their clients, still connected, got a 499.
     */
    const loading = new Map<string, Deferred.Deferred<CachedAdmission>>()

    /**
     * The entry, read by `load` on a miss; `load` says whether its result may be cached (a
     * display wallet's snapshot may not).
     */
    const getOrLoad = (
      platformId: string,
      endUserId: string | null,
      model: string,
      load: Effect.Effect<{ readonly entry: CachedAdmission; readonly cacheable: boolean }>
    ): Effect.Effect<CachedAdmission> =>
      Effect.suspend(() => {
        // No cache: each call reads for itself, as a read shared with an earlier caller may
        // predate a write this caller should see.
        if (ttlMs === 0) return Effect.map(load, ({ entry }) => entry)
        const cached = get(platformId, endUserId, model, Date.now())
        if (cached !== undefined) return Effect.succeed(cached)
        const key = keyOf(platformId, endUserId, model)
        const inFlight = loading.get(key)
        if (inFlight !== undefined) return Deferred.await(inFlight)
        const done = Deferred.unsafeMake<CachedAdmission>(FiberId.none)
        loading.set(key, done)
        return load.pipe(
          Effect.tap(({ cacheable, entry }) => Effect.sync(() => cacheable && set(platformId, endUserId, model, entry))),
          Effect.map(({ entry }) => entry),
          Effect.onExit((exit) =>
            Effect.suspend(() => {
              loading.delete(key)
              return Deferred.done(done, Exit.isSuccess(exit) ? exit : Exit.failCause(exit.cause) as Exit.Exit<CachedAdmission>)
            })
          ),
          Effect.forkIn(scope),
          Effect.zipRight(Deferred.await(done))
        )
      })

    /** After a write of the platform's state (or, without a platform, any write of the operator). */
    const invalidate = (platformId?: string) =>
      Effect.sync(() => {
        if (platformId === undefined) entries.clear()
        else entries.delete(platformId)
      })

    return { getOrLoad, invalidate } as const
  })
}) {
  /**
   * Tests: every read answers `snapshotOf(platformId, endUserId, model)`, as read before any call
   * was queued, and never runs the database read it is given.
   */
  static readonly test = (
    snapshotOf: (platformId: string, endUserId: string | null, model: string) => AdmissionSnapshot
  ): Layer.Layer<AdmissionCache> =>
    Layer.succeed(
      AdmissionCache,
      AdmissionCache.make({
        getOrLoad: (platformId, endUserId, model) =>
          Effect.sync(() => ({ snapshot: snapshotOf(platformId, endUserId, model), loadedAt: Date.now(), unsettled: NOTHING, totals: NOTHING })),
        invalidate: () => Effect.void
      })
    )
}
