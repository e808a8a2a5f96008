// AdmissionCache's shared reads: concurrent misses of one key share one read, and a caller that
// goes away (its client hung up: the request fiber is interrupted) does not take the read, or
// the other callers waiting for it, down with it. It used to: they failed with its interruption
// and their clients, still connected, got a 499. With a TTL of 0 nothing is shared or kept.
import { expect, it } from "@effect/vitest"
import { BigDecimal, ConfigProvider, Deferred, Effect, Fiber, Layer } from "effect"
import { AdmissionCache, type CachedAdmission } from "../../layers/pipeline/AdmissionCache.js"
import type { AdmissionSnapshot } from "../../layers/pipeline/AdmissionSnapshot.js"

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

const withTtl = (ttl: string) =>
  AdmissionCache.Default.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["GATEWAY_ADMISSION_CACHE_TTL", ttl]])))))

it.scoped("GATEWAY_ADMISSION_CACHE_TTL=0 builds, and each call reads for itself: a read in flight is not shared, nothing is kept", () =>
  Effect.gen(function*() {
    const cache = yield* AdmissionCache
    const release = yield* Deferred.make<void>()
    let reads = 0
    const read = (hold: boolean) =>
      Effect.sync(() => ++reads).pipe(
        Effect.tap(() => hold ? Deferred.await(release) : Effect.void),
        Effect.map((n) => ({ entry: { ...entry, loadedAt: n }, cacheable: true }))
      )
    // The first caller's read is still in flight (it may predate a write) when the next call checks.
    const first = yield* Effect.fork(cache.getOrLoad("p", "u", "m", read(true)))
    yield* Effect.yieldNow()
    const second = yield* Effect.fork(cache.getOrLoad("p", "u", "m", read(false)))
    yield* Effect.yieldNow()
    yield* Deferred.succeed(release, undefined)
    expect((yield* Fiber.join(first)).loadedAt).toBe(1)
    expect((yield* Fiber.join(second)).loadedAt).toBe(2)
    // Completed reads are not kept either.
    expect((yield* cache.getOrLoad("p", "u", "m", read(false))).loadedAt).toBe(3)
    expect(reads).toBe(3)
  }).pipe(Effect.provide(withTtl("0"))))

it.scoped("the TTL in Effect's former spelling still builds (0 millis)", () =>
  Effect.gen(function*() {
    const cache = yield* AdmissionCache
    let reads = 0
    const read = Effect.sync(() => ({ entry: { ...entry, loadedAt: ++reads }, cacheable: true }))
    yield* cache.getOrLoad("p", "u", "m", read)
    yield* cache.getOrLoad("p", "u", "m", read)
    expect(reads).toBe(2)
  }).pipe(Effect.provide(withTtl("0 millis"))))
