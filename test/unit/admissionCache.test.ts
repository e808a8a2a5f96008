// AdmissionCache's shared reads: concurrent misses of one key share one read, and a caller that
// goes away (its client hung up: the request fiber is interrupted) does not take the read, or
// the other callers waiting for it, down with it. It used to: they failed with its interruption
// and their clients, still connected, got a 499.
import { expect, it } from "@effect/vitest"
import { BigDecimal, Deferred, Effect, Fiber } from "effect"
import { AdmissionCache, type CachedAdmission } from "../../layers/AdmissionCache.js"
import type { AdmissionSnapshot } from "../../layers/AdmissionSnapshot.js"

const zero = BigDecimal.make(0n, 0)
const entry: CachedAdmission = {
  snapshot: {} as AdmissionSnapshot,
  loadedAt: Date.now(),
  unsettled: { budget: zero, wallet: zero },
  totals: { budget: zero, wallet: zero }
}

it.scoped("a caller interrupted during the shared read: the read completes for the others, once", () =>
  Effect.gen(function*() {
    const cache = yield* AdmissionCache
    const release = yield* Deferred.make<void>()
    let reads = 0
    const load = Effect.sync(() => reads++).pipe(
      Effect.zipRight(Deferred.await(release)),
      Effect.as({ entry: { ...entry, loadedAt: Date.now() }, cacheable: true })
    )
    const first = yield* Effect.fork(cache.getOrLoad("p", "u", "m", load))
    yield* Effect.yieldNow()
    const second = yield* Effect.fork(cache.getOrLoad("p", "u", "m", load))
    yield* Effect.yieldNow()
    yield* Fiber.interrupt(first)
    yield* Deferred.succeed(release, undefined)
    const got = yield* Fiber.join(second)
    expect(got.unsettled).toBe(entry.unsettled)
    expect(reads).toBe(1)
    // The read was cached for the next caller too.
    const third = yield* cache.getOrLoad("p", "u", "m", Effect.die("not read again"))
    expect(third).toBe(got)
  }).pipe(Effect.provide(AdmissionCache.Default)))
