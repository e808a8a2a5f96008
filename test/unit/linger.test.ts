// The writers' wait for more work (layers/lib/Linger.ts): bounded by its timer, cut short at once.
import { it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { expect } from "vitest"
import { makeLinger } from "../../layers/lib/Linger.js"

it.effect("a cut ends the wait under way at once; with none under way it says so", () =>
  Effect.gen(function*() {
    const linger = makeLinger()
    expect(linger.cut()).toBe(false)
    const waiting = yield* Effect.fork(linger.wait(60_000))
    yield* Effect.yieldNow()
    expect(linger.cut()).toBe(true)
    yield* Fiber.join(waiting)
    expect(linger.cut()).toBe(false)
  }))

it.live("the wait ends by itself after its time", () =>
  Effect.gen(function*() {
    const linger = makeLinger()
    const started = Date.now()
    yield* linger.wait(20)
    expect(Date.now() - started).toBeGreaterThanOrEqual(15)
    expect(linger.cut()).toBe(false)
  }))

it.effect("an interrupted wait leaves nothing to cut", () =>
  Effect.gen(function*() {
    const linger = makeLinger()
    const waiting = yield* Effect.fork(linger.wait(60_000))
    yield* Effect.yieldNow()
    yield* Fiber.interrupt(waiting)
    expect(linger.cut()).toBe(false)
  }))
