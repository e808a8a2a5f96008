// Group commit of call records (CallRecords): the records put while a write is under way, or
// while the writer lingers for calls still running, go to the store in one round trip, and every
// answer waits for exactly the write that carries its own record. Deletes have no one waiting:
// they ride with the next records. Each round trip to the store costs the instance a socket write
// and read plus the client's work, whatever it carries, so under load fewer and fuller writes
// are most of what records cost (docs/decisions.md "Settlement").
import { Effect, Schedule } from "effect"
import { makeLinger } from "../lib/Linger.js"
import type { Settlement } from "./Settlement.js"

/** A write of the records that failed for a reason other than an outage: retried as an outage is. */
const RETRY = Schedule.exponential("100 millis").pipe(Schedule.union(Schedule.spaced("5 seconds")))

/**
 * How long deletes alone wait for a write of records to ride with: a delete has no one waiting,
 * and a record left a moment longer only means a sweeper would apply it again, as nothing.
 */
const DELETES_LINGER_MS = 1_000

export interface RecordGroupOptions {
  /** One round trip: writes (or replaces, by id) the inserts and deletes the others. */
  readonly write: (inserts: ReadonlyArray<Settlement>, deletes: ReadonlyArray<string>) => Effect.Effect<void, unknown>
  /** How long a due record waits for those of the calls still running (0: none). */
  readonly lingerMs: number
  /** A write that takes longer lets the answers go without waiting for it. */
  readonly waitMs: number
  /** Not reported as a failed write (the settlement writer reports database outages). */
  readonly quietFailure: (error: unknown) => boolean
}

export interface RecordGroups {
  /** A call starts: its record may soon join a write. Returns the call's end (settled or dropped), to call once. */
  readonly follow: () => () => void
  /** Puts a settlement on record (replacing its call's earlier record); returns what waits until it is written. */
  readonly put: (settlement: Settlement) => Effect.Effect<void>
  /** Removes a call's record (it ended without a settlement). */
  readonly remove: (id: string) => void
  /** These calls' settlements are committed: their records go with the next write. */
  readonly committed: (ids: ReadonlyArray<string>) => void
  /** The writer, for as long as the service lives. */
  readonly writer: Effect.Effect<never, unknown>
  /** The service closes: answers stop waiting, the writer stops lingering. */
  readonly closing: () => void
  /** What is still to write, in one last round trip (after `closing`). */
  readonly writeRest: Effect.Effect<void, unknown>
}

export const makeRecordGroups = ({ lingerMs, quietFailure, waitMs, write }: RecordGroupOptions): RecordGroups => {
  /**
   * Records to write (by id: a final settlement replaces its cut) and to delete with the next
   * group. Each write takes them and starts new ones, never `clear()`s them: a cleared Map keeps
   * its old table, and once the Map is in the old generation that table's references to the
   * young settlements kept them through every scavenge until the next full collection.
   */
  let opens = new Map<string, Settlement>()
  let closes = new Set<string>()
  /** Calls followed and not yet settled or dropped: records that may still join the next write. */
  let running = 0
  /** The writer's wait for the records of calls still running (or, deletes alone, for any record). */
  const linger = makeLinger()
  /** The writer lingers with deletes alone: the first record ends it. */
  let deletesOnly = false
  /**
   * Answers do not wait for their records while a write is failing (the store unreachable), runs
   * past `waitMs` (a lock), or the service is closing (calls cut by a shutdown settle after it).
   */
  let failing = false
  let closed = false
  /** A failed write was logged and no write has succeeded since. */
  let reported = false
  // Each answer waits for exactly the write that carries its record: `nextWrite` is done once
  // the write that takes the records put since the last one started is done, `inFlight` once the
  // write under way is (one wake-up per answer, not one per write it sees go by). Latches, not
  // Deferreds: a Deferred is built by an object spread, and each one costs V8 four new hidden
  // classes (hot-path rule "no hidden class per call", docs/performance.md).
  let nextWrite = Effect.unsafeMakeLatch(false)
  let inFlight: Effect.Latch | undefined
  /** Open while there is work for the writer. */
  const work = Effect.unsafeMakeLatch(false)
  const stopWaiting = () => {
    if (failing) return
    failing = true
    inFlight?.unsafeOpen()
    nextWrite.unsafeOpen()
    nextWrite = Effect.unsafeMakeLatch(false)
  }

  /**
   * Before a write: deletes alone wait for records (or DELETES_LINGER_MS); records wait up to
   * `lingerMs` while other calls run, until every call followed is waiting for its own.
   */
  const gather = Effect.suspend(() => {
    if (closed || failing) return Effect.void
    const records = () => opens.size > 0 && lingerMs > 0 && running > 0 ? linger.wait(lingerMs) : Effect.void
    if (opens.size > 0) return records()
    deletesOnly = true
    return Effect.zipRight(
      Effect.ensuring(linger.wait(DELETES_LINGER_MS), Effect.sync(() => void (deletesOnly = false))),
      Effect.suspend(() => closed || failing ? Effect.void : records())
    )
  })

  /** One write: what was opened and closed since the last one, in one round trip. */
  const writeGroup = Effect.gen(function*() {
    work.unsafeClose()
    const written = nextWrite
    inFlight = written
    nextWrite = Effect.unsafeMakeLatch(false)
    const inserts = [...opens.values()]
    const deletes = [...closes]
    opens = new Map()
    closes = new Set()
    const slow = setTimeout(stopWaiting, waitMs)
    yield* write(inserts, deletes).pipe(
      Effect.tapError((e) =>
        Effect.suspend(() => {
          stopWaiting()
          // Once per streak of failures (an outage retries every few seconds).
          if (reported || quietFailure(e)) return Effect.void
          reported = true
          return Effect.logWarning(`call records: write failed; answers go without waiting for their records until a write succeeds: ${e instanceof Error ? e.message : String(e)}`)
        })
      ),
      Effect.retry(RETRY)
    )
    if (reported) yield* Effect.logInfo("call records: writes succeed again")
    reported = false
    clearTimeout(slow)
    failing = closed
    inFlight = undefined
    written.unsafeOpen()
  })

  const wake = () => work.unsafeOpen()

  return {
    follow: () => {
      running++
      let ended = false
      return () => {
        if (ended) return
        ended = true
        running--
        // The last call still running ended without a record (dropped): the others need not wait.
        if (running === 0 && opens.size > 0) linger.cut()
      }
    },
    put: (settlement) => {
      opens.set(settlement.id, settlement)
      closes.delete(settlement.id)
      wake()
      if (deletesOnly || running === 0) linger.cut()
      return failing ? Effect.void : nextWrite.await
    },
    remove: (id) => {
      if (opens.delete(id)) return // never written
      closes.add(id)
      wake()
    },
    committed: (ids) => {
      for (const id of ids) closes.add(id)
      if (ids.length > 0) wake()
    },
    writer: Effect.forever(work.await.pipe(Effect.zipRight(gather), Effect.zipRight(writeGroup))),
    closing: () => {
      closed = true
      stopWaiting()
      linger.cut()
    },
    writeRest: Effect.suspend(() => opens.size + closes.size === 0 ? Effect.void : write([...opens.values()], [...closes]))
  }
}
