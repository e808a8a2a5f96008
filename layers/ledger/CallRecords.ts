// Call records (GATEWAY_CALL_RECORDS): a call's settlement is on record in Redis or Postgres
// (CallRecordStores) before its answer ends, so a call whose answer reached its client is billed
// even if its instance and its disk vanish the moment after. A call still running after GATEWAY_CALL_RECORD_AFTER is on record
// too, with what it comes to if it is cut (its prompt estimate, no completion: `interrupted`);
// its final settlement replaces that record. Records are written in groups with the calls ending
// meanwhile (group commit, RecordGroups.ts), and deleted with their settlements' commit (Postgres:
// by the same statement; Redis: with the next group once the writer reports the commit). An instance holds a Postgres advisory lock for as long as it lives (a session's
// lock goes when its connection does, so a dead instance is seen at once, without heartbeats or
// clocks); every instance sweeps the records of instances whose lock is free and applies them.
// Settlements are idempotent by id (the log row's), so a record applied twice applies once.
import type { SqlError } from "@effect/sql/SqlError"
import { PgClient } from "@effect/sql-pg"
import { Deferred, Effect, Layer, Schedule } from "effect"
import { randomUUID } from "node:crypto"
import { durationMsConfig } from "../lib/ConfigValues.js"
import { isDatabaseOutage } from "../lib/SqlErrors.js"
import { databaseIdentity, postgresRecordStore, type RecordStore, redisConnection, redisRecordStore } from "./CallRecordStores.js"
import { makeRecordGroups } from "./RecordGroups.js"
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

/**
 * GATEWAY_CALL_RECORD_LINGER: how long a call's record waits for the records of the calls still
 * running before it is written (0: not at all). The wait ends as soon as every call followed is
 * waiting for its own record, so a lone call never waits; under load it puts several calls'
 * records in one round trip.
 */
export const callRecordLingerMs = durationMsConfig("GATEWAY_CALL_RECORD_LINGER", 2)

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
    const lingerMs = yield* callRecordLingerMs
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

    // Chosen whether or not this instance records: it sweeps the records of dead instances either way.
    const store: RecordStore = (yield* callRecordStore) === "postgres"
      ? postgresRecordStore(sql, instanceId, synchronousCommit)
      : redisRecordStore(yield* redisConnection, yield* databaseIdentity(sql), instanceId)
    const groups = makeRecordGroups({ write: store.write, lingerMs, waitMs, quietFailure: isOutage })
    // Records outside Postgres go once the writer has committed their settlements.
    if (enabled && !store.deletedBySettlement) settlements.whenWritten(groups.committed)
    if (enabled) yield* Effect.forkScoped(groups.writer)

    /**
     * Follows a call that starts (its settlement will have id `id`): past GATEWAY_CALL_RECORD_AFTER
     * it goes on record with `cut()`, what it comes to if it is cut.
     */
    const track = (id: string, cut: () => Settlement): TrackedCall => {
      if (!enabled) return UNTRACKED
      let recorded = false
      const ended = groups.follow()
      const putCut = () => {
        recorded = true
        groups.put(cut())
      }
      const timer = recordAfterMs === 0 ? (putCut(), undefined) : setTimeout(putCut, recordAfterMs)
      return {
        settled: (settlement) => {
          clearTimeout(timer)
          ended()
          return groups.put(settlement)
        },
        dropped: () => {
          clearTimeout(timer)
          ended()
          if (recorded) groups.remove(id)
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
        groups.closing()
        // Records outside Postgres go once their settlements commit: let the writer finish first.
        const committed = enabled && !store.deletedBySettlement ? settlements.awaitEverything() : Effect.void
        return committed.pipe(
          Effect.zipRight(groups.writeRest),
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
