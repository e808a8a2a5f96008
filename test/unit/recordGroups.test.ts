// Group commit of call records (layers/ledger/RecordGroups.ts): a lone call's record is written at
// once; while other calls run, a record waits (up to the linger) so theirs join the same write;
// deletes ride with the next records; every answer waits for the write that carries its record.
// The store is a fake that notes each write; lingers are set far past any test's run (60 s) where
// a test shows that something did not wait for them.
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { makeRecordGroups, type RecordGroups } from "../../layers/ledger/RecordGroups.js"
import type { Settlement } from "../../layers/ledger/Settlement.js"

interface Write {
  readonly inserts: ReadonlyArray<string>
  readonly deletes: ReadonlyArray<string>
}

/** Only the id matters to the groups: the store keeps what it is given. */
const settlement = (id: string) => ({ id }) as unknown as Settlement

const LONG = 60_000

const groupsWith = (lingerMs: number, gate?: Deferred.Deferred<void>) => {
  const writes: Array<Write> = []
  const groups = makeRecordGroups({
    lingerMs,
    waitMs: LONG,
    quietFailure: () => false,
    write: (inserts, deletes) =>
      Effect.zipRight(
        Effect.sync(() => void writes.push({ inserts: inserts.map((s) => s.id), deletes: [...deletes] })),
        gate === undefined ? Effect.void : Deferred.await(gate)
      )
  })
  return { groups, writes }
}

describe("RecordGroups", () => {
  it.live("a lone call's record is written at once, whatever the linger", () =>
    Effect.gen(function*() {
      const { groups, writes } = groupsWith(LONG)
      yield* Effect.forkScoped(groups.writer)
      const ended = groups.follow()
      ended()
      yield* groups.put(settlement("a"))
      expect(writes).toEqual([{ inserts: ["a"], deletes: [] }])
    }).pipe(Effect.scoped))

  /**
   * Calls a and b run; a settles and waits (the linger is far longer than the test); `finishB`
   * ends b, which ends a's wait: the one write holds what `written` says.
   */
  const aWaitsForB = (finishB: (groups: RecordGroups, endB: () => void) => Effect.Effect<void>, written: ReadonlyArray<string>) =>
    Effect.gen(function*() {
      const { groups, writes } = groupsWith(LONG)
      yield* Effect.forkScoped(groups.writer)
      const endA = groups.follow()
      const endB = groups.follow()
      endA()
      const a = yield* Effect.fork(groups.put(settlement("a")))
      yield* Effect.sleep("20 millis")
      expect(writes).toEqual([])
      expect(a.unsafePoll()).toBeNull()
      yield* finishB(groups, endB)
      yield* Fiber.join(a)
      expect(writes).toEqual([{ inserts: written, deletes: [] }])
    }).pipe(Effect.scoped)

  it.live("a record waits for the calls still running; the last one's record ends the wait, in one write", () =>
    aWaitsForB((groups, endB) => {
      endB()
      return groups.put(settlement("b"))
    }, ["a", "b"]))

  it.live("the linger is bounded: a record goes without those of calls still running once it has passed", () =>
    Effect.gen(function*() {
      const { groups, writes } = groupsWith(30)
      yield* Effect.forkScoped(groups.writer)
      const endA = groups.follow()
      groups.follow() // runs past the test
      endA()
      yield* groups.put(settlement("a"))
      expect(writes).toEqual([{ inserts: ["a"], deletes: [] }])
    }).pipe(Effect.scoped))

  it.live("a call that ends without a record (dropped) ends the wait of the others", () =>
    aWaitsForB((_, endB) => Effect.sync(endB), ["a"]))

  it.live("deletes alone wait for the next records and go with them", () =>
    Effect.gen(function*() {
      const { groups, writes } = groupsWith(LONG)
      yield* Effect.forkScoped(groups.writer)
      groups.committed(["old-1", "old-2"])
      yield* Effect.sleep("50 millis")
      expect(writes).toEqual([])
      const ended = groups.follow()
      ended()
      yield* groups.put(settlement("a"))
      expect(writes).toEqual([{ inserts: ["a"], deletes: ["old-1", "old-2"] }])
    }).pipe(Effect.scoped))

  it.live("records put during a write go in the next one; each answer waits for its own write", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const { groups, writes } = groupsWith(0, gate)
      yield* Effect.forkScoped(groups.writer)
      const first = yield* Effect.fork(groups.put(settlement("a")))
      yield* Effect.sleep("20 millis")
      const second = yield* Effect.fork(groups.put(settlement("b")))
      yield* Effect.sleep("20 millis")
      expect(writes).toEqual([{ inserts: ["a"], deletes: [] }])
      expect(first.unsafePoll()).toBeNull()
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(first)
      yield* Fiber.join(second)
      expect(writes).toEqual([{ inserts: ["a"], deletes: [] }, { inserts: ["b"], deletes: [] }])
    }).pipe(Effect.scoped))

  it.live("closing: answers stop waiting, and what is left goes in one last write", () =>
    Effect.gen(function*() {
      const { groups, writes } = groupsWith(LONG)
      yield* Effect.forkScoped(groups.writer)
      const endA = groups.follow()
      groups.follow()
      endA()
      const a = yield* Effect.fork(groups.put(settlement("a")))
      yield* Effect.sleep("20 millis")
      groups.closing()
      yield* Fiber.join(a)
      yield* groups.writeRest
      expect(writes.flatMap((w) => w.inserts)).toEqual(["a"])
    }).pipe(Effect.scoped))
})
