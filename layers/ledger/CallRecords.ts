// Call records (GATEWAY_CALL_RECORDS): a call's settlement is on record in Redis or Postgres
// (CallRecordStores) before its answer ends, so a call whose answer reached its client is billed
// even if its instance and its disk vanish the moment after. A call still running after GATEWAY_CALL_RECORD_AFTER is on record
// too, with what it comes to if it is cut (its prompt estimate, no completion: `interrupted`);
// its final settlement replaces that record. Records are written in groups with the calls ending
// meanwhile (group commit), and deleted with their settlements' commit (Postgres: by the same
// statement; Redis: with the next group once the writer reports the commit). An instance holds a Postgres advisory lock for as long as it lives (a session's
// lock goes when its connection does, so a dead instance is seen at once, without heartbeats or
// clocks); every instance sweeps the records of instances whose lock is free and applies them.
// Settlements are idempotent by id (the log row's), so a record applied twice applies once.
import type { SqlError } from "@effect/sql/SqlError"
import { PgClient } from "@effect/sql-pg"
import { Deferred, Effect, Exit, FiberId, Layer, Schedule } from "effect"
import { randomUUID } from "node:crypto"
import { durationMsConfig } from "../lib/ConfigValues.js"
import { isDatabaseOutage } from "../lib/SqlErrors.js"
import { databaseIdentity, postgresRecordStore, type RecordStore, redisConnection, redisRecordStore } from "./CallRecordStores.js"
import { type Settlement, settlementFromJson } from "./Settlement.js"
import { Settlements } from "./Settlements.js"
import { callRecordsEnabled, callRecordStore, settlementSynchronousCommit, settlementWaitMs } from "./SettlementSettings.js"

/** Postgres unreachable: the writer waits it out quietly (the settlement writer reports outages). */
const isOutage = (e: unknown) =>
  typeof e === "object" && e !== null && (e as { readonly _tag?: unknown })._tag === "SqlError" && isDatabaseOutage(e as SqlError)

/** The advisory lock space of instance liveness (an int4; the second key is the instance id's hash). */
export const LIVENESS_LOCK_SPACE = 72_133_812

/** GATEWAY_CALL_SWEEP: how often an instance looks for the calls of dead instances (also once at start). */
export const callSweepMs = durationMsConfig("GATEWAY_CALL_SWEEP", 10_000, 1)

/**
 * GATEWAY_CALL_RECORD_AFTER: a call still running this long is put on record with what it comes
 * to if cut (0: every call, as it starts). Shorter calls are on record only with their final
 * settlement: a crash in their first moments loses them (their clients received nothing).
 */
export const callRecordAfterMs = durationMsConfig("GATEWAY_CALL_RECORD_AFTER", 250, 0)

/** A call in flight, as CallRecords follows it. */
export interface TrackedCall {
  /** The call is settled: `settlement` goes on record (replacing its cut), waited for before the answer ends. */
  readonly settled: (settlement: Settlement) => Effect.Effect<void>
  /** The call ended without a settlement (it never reached an upstream): its record, if any, goes. */
  readonly dropped: () => void
}

/** A write of the records that failed for a reason other than an outage: retried as an outage is. */
const RETRY = Schedule.exponential("100 millis").pipe(Schedule.union(Schedule.spaced("5 seconds")))

/** A call followed by nothing (call records off, tests). */
const UNTRACKED: TrackedCall = { settled: () => Effect.void, dropped: () => undefined }

export class CallRecords extends Effect.Service<CallRecords>()("gateway/CallRecords", {
  dependencies: [Settlements.Default],
  scoped: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const settlements = yield* Settlements
    const synchronousCommit = yield* settlementSynchronousCommit
    const sweepMs = yield* callSweepMs
    const recordAfterMs = yield* callRecordAfterMs
    const waitMs = yield* settlementWaitMs
    // Off, this instance records nothing; it still settles the records of dead instances.
    const enabled = yield* callRecordsEnabled
    const instanceId = randomUUID()

    // Liveness: a session lock on a connection of its own, taken before any record is written.
    // A lost connection (Postgres restarted) loses the lock: it is checked every sweep and taken
    // again on a new connection.
    const locked = yield* Deferred.make<void>()
    const holdLiveness = Effect.scoped(Effect.gen(function*() {
      const connection = yield* sql.reserve
      yield* connection.executeRaw(`SELECT pg_advisory_lock(${LIVENESS_LOCK_SPACE}, hashtext($1))`, [instanceId])
      yield* Effect.addFinalizer(() => connection.executeRaw("SELECT pg_advisory_unlock_all()", []).pipe(Effect.ignore))
      yield* Deferred.succeed(locked, undefined)
      return yield* connection.executeRaw("SELECT 1", []).pipe(Effect.delay(sweepMs), Effect.forever)
    })).pipe(
      Effect.tapErrorCause((cause) => Effect.logWarning("call records: liveness lock lost; taking it again", cause)),
      Effect.retry(Schedule.spaced("1 second"))
    )
    if (enabled) {
      yield* Effect.forkScoped(holdLiveness)
      yield* Deferred.await(locked).pipe(Effect.timeout("30 seconds"), Effect.orDie)
    }

    /** Records to write (by id: a final settlement replaces its cut) and to delete with the next group. */
    const opens = new Map<string, Settlement>()
    const closes = new Set<string>()
    /**
     * Answers do not wait for their records while a write is failing (database unreachable), runs
     * past GATEWAY_SETTLEMENT_WAIT (a lock), or the service is closing (calls cut by a shutdown
     * settle after it): their settlements still go to the writer (and its journal).
     */
    let failing = false
    let closing = false
    /** A failed write was logged and no write has succeeded since. */
    let reported = false
    // Each answer waits for exactly the write that carries its record: `nextWrite` is done once
    // the write that takes the records put since the last one started is done, `inFlight` once the
    // write under way is (one wake-up per answer, not one per write it sees go by).
    let nextWrite = Deferred.unsafeMake<void>(FiberId.none)
    let inFlight: Deferred.Deferred<void> | undefined
    let work = Deferred.unsafeMake<void>(FiberId.none)
    const stopWaiting = () => {
      if (failing) return
      failing = true
      if (inFlight !== undefined) Deferred.unsafeDone(inFlight, Exit.void)
      Deferred.unsafeDone(nextWrite, Exit.void)
      nextWrite = Deferred.unsafeMake<void>(FiberId.none)
    }

    // Chosen whether or not this instance records: it sweeps the records of dead instances either way.
    const store: RecordStore = (yield* callRecordStore) === "postgres"
      ? postgresRecordStore(sql, instanceId, synchronousCommit)
      : redisRecordStore(yield* redisConnection, yield* databaseIdentity(sql), instanceId)
    const write = store.write
    // Records outside Postgres go once the writer has committed their settlements.
    if (enabled && !store.deletedBySettlement) {
      settlements.whenWritten((ids) => {
        for (const id of ids) closes.add(id)
        if (ids.length > 0) Deferred.unsafeDone(work, Exit.void)
      })
    }

    /** One writer: what was opened and closed since its last write, in one round trip. */
    const writer = Effect.gen(function*() {
      yield* Deferred.await(work)
      work = Deferred.unsafeMake<void>(FiberId.none)
      const written = nextWrite
      inFlight = written
      nextWrite = Deferred.unsafeMake<void>(FiberId.none)
      const inserts = [...opens.values()]
      const deletes = [...closes]
      opens.clear()
      closes.clear()
      const slow = setTimeout(stopWaiting, waitMs)
      yield* write(inserts, deletes).pipe(
        Effect.tapError((e) =>
          Effect.suspend(() => {
            stopWaiting()
            // Once per streak of failures (an outage retries every few seconds); a Postgres outage
            // is the settlement writer's to report.
            if (reported || isOutage(e)) return Effect.void
            reported = true
            return Effect.logWarning(`call records: write failed; answers go without waiting for their records until a write succeeds: ${e instanceof Error ? e.message : String(e)}`)
          })
        ),
        Effect.retry(RETRY)
      )
      if (reported) yield* Effect.logInfo("call records: writes succeed again")
      reported = false
      clearTimeout(slow)
      failing = closing
      inFlight = undefined
      Deferred.unsafeDone(written, Exit.void)
    }).pipe(Effect.forever)
    if (enabled) yield* Effect.forkScoped(writer)

    /** Puts a settlement on record; returns what waits until it is written. */
    const put = (settlement: Settlement): Effect.Effect<void> => {
      opens.set(settlement.id, settlement)
      closes.delete(settlement.id)
      Deferred.unsafeDone(work, Exit.void)
      return failing ? Effect.void : Deferred.await(nextWrite)
    }

    const remove = (id: string): void => {
      if (opens.delete(id)) return // never written
      closes.add(id)
      Deferred.unsafeDone(work, Exit.void)
    }

    /**
     * Follows a call that starts (its settlement will have id `id`): past GATEWAY_CALL_RECORD_AFTER
     * it goes on record with `cut()`, what it comes to if it is cut.
     */
    const track = (id: string, cut: () => Settlement): TrackedCall => {
      if (!enabled) return UNTRACKED
      let recorded = false
      const putCut = () => {
        recorded = true
        put(cut())
      }
      const timer = recordAfterMs === 0 ? (putCut(), undefined) : setTimeout(putCut, recordAfterMs)
      return {
        settled: (settlement) => {
          clearTimeout(timer)
          return put(settlement)
        },
        dropped: () => {
          clearTimeout(timer)
          if (recorded) remove(id)
        }
      }
    }

    /** Settles the records of one dead instance, if its lock is free (it is dead) and no other sweeper has it. */
    const sweepInstance = (dead: string) =>
      Effect.gen(function*() {
        const [lock] = yield* sql<{ readonly free: boolean }>`SELECT pg_try_advisory_xact_lock(${LIVENESS_LOCK_SPACE}, hashtext(${dead})) AS free`
        if (lock?.free !== true) return 0
        const records = yield* store.recordsOf(dead)
        for (const record of records) {
          const settlement = settlementFromJson(record)
          if (settlement !== null) yield* settlements.settle(settlement)
        }
        yield* store.dropAll(dead)
        return records.length
      }).pipe(sql.withTransaction)

    const sweep = Effect.gen(function*() {
      for (const instance of yield* store.others) {
        const settled = yield* sweepInstance(instance)
        if (settled > 0) yield* Effect.logWarning(`call records: ${settled} calls of a stopped instance settled from their records`)
      }
    }).pipe(Effect.catchAllCause((cause) => Effect.logWarning("call records: sweep failed", cause)))
    yield* Effect.forkScoped(sweep.pipe(Effect.zipRight(Effect.sleep(sweepMs)), Effect.forever))

    // A clean stop settles its calls first (the listeners drain before services close); calls cut
    // by its deadline settle a moment later, without waiting for their records. What is queued
    // goes with one last write.
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        closing = true
        stopWaiting()
        // Records outside Postgres go once their settlements commit: let the writer finish first.
        const committed = enabled && !store.deletedBySettlement ? settlements.awaitEverything() : Effect.void
        return committed.pipe(
          Effect.zipRight(Effect.suspend(() => opens.size + closes.size === 0 ? Effect.void : write([...opens.values()], [...closes]))),
          Effect.zipRight(enabled ? store.leave : Effect.void)
        )
      }).pipe(Effect.ignore)
    )

    return { track } as const
  })
}) {
  /** Tests: records nothing; `recorded` collects the settlements put on record. */
  static readonly test = (recorded: Array<Settlement> = []): Layer.Layer<CallRecords> =>
    Layer.succeed(CallRecords, CallRecords.make({
      track: () => ({
        settled: (settlement) => Effect.sync(() => void recorded.push(settlement)),
        dropped: () => undefined
      })
    }))
}
