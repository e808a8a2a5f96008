// pullEach (layers/lib/StreamPull.ts): every batch reaches the writer, waits are honoured, and the
// stream's finalizers have run when it returns, whether the stream ended, died or was
// interrupted. It closes its scope only on failure, so the first test pins the Effect behaviour
// that makes that sound: a channel that ends in a continuation runs its stages' finalizers
// during the pull that reaches the end.
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Exit, Fiber, Option, Stream } from "effect"
import { pulledStream, pullEach, recoverWith } from "../../layers/lib/StreamPull.js"

/** The chat stream's shape: a pulled source with its own finalizer, a catchAll, an outer finalizer. */
const chatLike = (batches: ReadonlyArray<ReadonlyArray<number>>, log: Array<string>, end: Effect.Effect<never, Option.Option<string>>) =>
  Stream.suspend(() => {
    let next = 0
    const pull = Effect.suspend(() =>
      next < batches.length ? Effect.succeed(Chunk.unsafeFromArray(batches[next++]!)) : end
    )
    return Stream.repeatEffectChunkOption(pull).pipe(Stream.ensuring(Effect.sync(() => log.push("source closed"))))
  }).pipe(
    Stream.catchAll((error) => Stream.make(-1).pipe(Stream.tap(() => Effect.sync(() => log.push(`caught ${error}`))))),
    Stream.ensuring(Effect.sync(() => log.push("settled")))
  )

describe("pullEach", () => {
  it.effect("runs every finalizer by the stream's end, inner before outer, without closing its scope", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const seen: Array<number> = []
      yield* pullEach(chatLike([[1, 2], [], [3]], log, Effect.fail(Option.none())), (batch) => {
        seen.push(...batch)
        return undefined
      })
      expect(seen).toEqual([1, 2, 3])
      expect(log).toEqual(["source closed", "settled"])
    }))

  it.effect("a failing source is caught by the stage after it, then finalized", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const seen: Array<number> = []
      yield* pullEach(chatLike([[1]], log, Effect.fail(Option.some("dropped"))), (batch) => {
        seen.push(...batch)
        return undefined
      })
      expect(seen).toEqual([1, -1])
      expect(log).toEqual(["source closed", "caught dropped", "settled"])
    }))

  it.effect("waits for what the writer asks before the next pull", () =>
    Effect.gen(function*() {
      const order: Array<string> = []
      yield* pullEach(Stream.make(1, 2).pipe(Stream.rechunk(1)), (batch) => {
        order.push(`write ${Chunk.join(Chunk.map(batch, String), ",")}`)
        return Effect.sync(() => order.push("drained"))
      })
      expect(order).toEqual(["write 1", "drained", "write 2", "drained"])
    }))

  it.effect("an interrupted pull still finalizes the stream", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const first = yield* Deferred.make<void>()
      const stream = Stream.concat(Stream.make(1), Stream.never).pipe(Stream.ensuring(Effect.sync(() => log.push("settled"))))
      const fiber = yield* Effect.fork(pullEach(stream, () => {
        Deferred.unsafeDone(first, Exit.void)
        return undefined
      }))
      yield* Deferred.await(first)
      const exit = yield* Fiber.interrupt(fiber)
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(log).toEqual(["settled"])
    }))

  it.effect("a stream that dies is finalized and the defect comes out", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const stream = Stream.concat(Stream.make(1), Stream.die("boom")).pipe(Stream.ensuring(Effect.sync(() => log.push("settled"))))
      const exit = yield* Effect.exit(pullEach(stream, () => undefined))
      expect(Exit.isFailure(exit) && exit.cause._tag === "Die").toBe(true)
      expect(log).toEqual(["settled"])
    }))

  describe("a pulled stream (an upstream body's batches)", () => {
    /** A source of `batches` (the first in hand), then `failure` if any; the log says what happened, in order. */
    const pulled = (batches: ReadonlyArray<ReadonlyArray<number>>, log: Array<string>, failure?: string) => {
      let next = 1
      const rest = Effect.suspend((): Effect.Effect<Chunk.Chunk<number> | undefined, string> => {
        if (next < batches.length) return Effect.succeed(Chunk.unsafeFromArray(batches[next++]!))
        return failure === undefined ? Effect.succeed(undefined) : Effect.fail(failure)
      })
      return pulledStream<number, string>({
        first: Chunk.unsafeFromArray(batches[0]!),
        rest: batches.length === 1 && failure === undefined ? undefined : rest,
        end: (exit) => Effect.sync(() => log.push(`ended ${Exit.isInterrupted(exit) ? "interrupted" : exit._tag}`))
      })
    }
    const recovery = (log: Array<string>) => (error: string) =>
      Stream.make(-1).pipe(Stream.tap(() => Effect.sync(() => log.push(`recovered ${error}`))))
    const writeInto = (log: Array<string>) => (batch: Chunk.Chunk<number>) => {
      log.push(`write ${Chunk.join(Chunk.map(batch, String), ",")}`)
      return undefined
    }

    it.effect("a whole one (its one batch in hand) is written, then ended", () =>
      Effect.gen(function*() {
        const log: Array<string> = []
        yield* pullEach(recoverWith(pulled([[1, 2, 3]], log), recovery(log)), (batch) => {
          log.push(`write ${Chunk.join(Chunk.map(batch, String), ",")}`)
          return Effect.sync(() => log.push("drained"))
        })
        expect(log).toEqual(["write 1,2,3", "drained", "ended Success"])
      }))

    it.effect("is written batch by batch (empty ones skipped), then ended", () =>
      Effect.gen(function*() {
        const log: Array<string> = []
        yield* pullEach(recoverWith(pulled([[1], [], [2, 3]], log), recovery(log)), writeInto(log))
        expect(log).toEqual(["write 1", "write 2,3", "ended Success"])
      }))

    it.effect("a failure ends it first, then its recovery is written", () =>
      Effect.gen(function*() {
        const log: Array<string> = []
        yield* pullEach(recoverWith(pulled([[1], [2]], log, "dropped"), recovery(log)), writeInto(log))
        expect(log).toEqual(["write 1", "write 2", "ended Failure", "recovered dropped", "write -1"])
      }))

    it.effect("is the same stream to any other consumer, ended once", () =>
      Effect.gen(function*() {
        const log: Array<string> = []
        const collected = yield* Stream.runCollect(recoverWith(pulled([[1], [2]], log, "dropped"), recovery(log)))
        expect(Chunk.toReadonlyArray(collected)).toEqual([1, 2, -1])
        expect(log).toEqual(["ended Failure", "recovered dropped"])
      }))

    it.effect("interrupted while a write waits, still ends, with the interruption", () =>
      Effect.gen(function*() {
        const log: Array<string> = []
        const writing = yield* Deferred.make<void>()
        const fiber = yield* Effect.fork(pullEach(recoverWith(pulled([[1], [2]], log), recovery(log)), () => {
          Deferred.unsafeDone(writing, Exit.void)
          return Effect.never
        }))
        yield* Deferred.await(writing)
        yield* Fiber.interrupt(fiber)
        expect(log).toEqual(["ended interrupted"])
      }))
  })
})
