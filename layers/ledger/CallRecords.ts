// Call records: every model call in flight has a row in Postgres (`call_records`) holding the
// settlement it comes to if it is cut (its prompt estimate, no completion: `interrupted`). The
// row is written when the call starts, in groups with the calls starting meanwhile, and deleted
// once the call's own settlement is committed. An instance holds a Postgres advisory lock for as
// long as it lives (its session's lock goes when its connection does, so a dead instance is
// seen at once, without heartbeats or clocks); every instance sweeps the rows of instances whose
// lock is free and settles them. Settlements are idempotent by id (the log row's), so a row whose
// call was settled after all applies nothing.
import { PgClient } from "@effect/sql-pg"
import { Deferred, Effect, Exit, FiberId, Layer, Schedule } from "effect"
import { randomUUID } from "node:crypto"
import { durationMsConfig } from "../lib/ConfigValues.js"
import { isDatabaseOutage } from "../lib/SqlErrors.js"
import { type Settlement, settlementFromJson, settlementJson } from "./Settlement.js"
import { settlementSynchronousCommit, Settlements } from "./Settlements.js"

/** The advisory lock space of instance liveness (an int4; the second key is the instance id's hash). */
export const LIVENESS_LOCK_SPACE = 72_133_812

/** GATEWAY_CALL_SWEEP: how often an instance looks for the calls of dead instances (also once at start). */
export const callSweepMs = durationMsConfig("GATEWAY_CALL_SWEEP", 10_000, 1)

/** A write of the records that failed for a reason other than an outage: retried as an outage is. */
const RETRY = Schedule.exponential("100 millis").pipe(Schedule.union(Schedule.spaced("5 seconds")))

export class CallRecords extends Effect.Service<CallRecords>()("gateway/CallRecords", {
  dependencies: [Settlements.Default],
  scoped: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const settlements = yield* Settlements
    const synchronousCommit = yield* settlementSynchronousCommit
    const sweepMs = yield* callSweepMs
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
    yield* Effect.forkScoped(holdLiveness)
    yield* Deferred.await(locked).pipe(Effect.timeout("30 seconds"), Effect.orDie)

    /** Records to write and to delete with the next group. */
    const opens = new Map<string, Settlement>()
    const closes = new Set<string>()
    let lastSeq = 0
    let writtenThrough = 0
    /** A write is failing (database unreachable): starting calls do not wait for their records. */
    let failing = false
    let progress = Deferred.unsafeMake<void>(FiberId.none)
    let work = Deferred.unsafeMake<void>(FiberId.none)
    const wakeWaiters = () => {
      const done = progress
      progress = Deferred.unsafeMake<void>(FiberId.none)
      Deferred.unsafeDone(done, Exit.void)
    }

    const write = (inserts: ReadonlyArray<Settlement>, deletes: ReadonlyArray<string>) => {
      const rows = `[${inserts.map(settlementJson).join(",")}]`
      const gone = JSON.stringify(deletes)
      return sql`WITH config AS (SELECT set_config('synchronous_commit', ${synchronousCommit ? "on" : "off"}, true)),
        inserted AS (
          INSERT INTO call_records (id, instance_id, settlement)
          SELECT (r->>'id')::uuid, ${instanceId}, r FROM jsonb_array_elements(${rows}::jsonb) AS r
          ON CONFLICT (id) DO NOTHING
        ),
        deleted AS (DELETE FROM call_records WHERE id IN (SELECT jsonb_array_elements_text(${gone}::jsonb)::uuid))
        SELECT count(*) FROM config`
    }

    /** One writer: what was opened and closed since its last write, in one statement. */
    const writer = Effect.gen(function*() {
      yield* Deferred.await(work)
      work = Deferred.unsafeMake<void>(FiberId.none)
      const seq = lastSeq
      const inserts = [...opens.values()]
      const deletes = [...closes]
      opens.clear()
      closes.clear()
      yield* write(inserts, deletes).pipe(
        Effect.tapError((e) =>
          Effect.suspend(() => {
            if (!failing) {
              failing = true
              wakeWaiters()
            }
            return isDatabaseOutage(e) ? Effect.void : Effect.logError("call records: write failed", e)
          })
        ),
        Effect.retry(RETRY)
      )
      failing = false
      writtenThrough = seq
      wakeWaiters()
    }).pipe(Effect.forever)
    yield* Effect.forkScoped(writer)

    const awaitWritten = (seq: number): Effect.Effect<void> =>
      Effect.suspend(() =>
        writtenThrough >= seq || failing ? Effect.void : Effect.zipRight(Deferred.await(progress), awaitWritten(seq))
      )

    /**
     * Records a call that starts (`cut` is what it comes to if it is cut; its id is the id of the
     * call's settlement). Returns at once, with what waits until the record is written: a call
     * waits for it before its answer starts, so whatever reached a client is on record.
     */
    const open = (cut: Settlement): Effect.Effect<void> => {
      opens.set(cut.id, cut)
      const seq = ++lastSeq
      Deferred.unsafeDone(work, Exit.void)
      return awaitWritten(seq)
    }

    /** The call is settled (or was never sent upstream): its record goes. */
    const close = (id: string): void => {
      if (opens.delete(id)) return // never written
      closes.add(id)
      Deferred.unsafeDone(work, Exit.void)
    }

    /** Settles the records of one dead instance, if its lock is free (it is dead) and no other sweeper has it. */
    const sweepInstance = (dead: string) =>
      Effect.gen(function*() {
        const [lock] = yield* sql<{ readonly free: boolean }>`SELECT pg_try_advisory_xact_lock(${LIVENESS_LOCK_SPACE}, hashtext(${dead})) AS free`
        if (lock?.free !== true) return 0
        const rows = yield* sql<{ readonly id: string; readonly settlement: string }>`
          SELECT id::text AS id, settlement::text AS settlement FROM call_records WHERE instance_id = ${dead}`
        for (const row of rows) {
          const cut = settlementFromJson(row.settlement)
          if (cut !== null) yield* settlements.settle(cut)
        }
        yield* sql`DELETE FROM call_records WHERE instance_id = ${dead}`
        return rows.length
      }).pipe(sql.withTransaction)

    const sweep = Effect.gen(function*() {
      const instances = yield* sql<{ readonly instance_id: string }>`
        SELECT DISTINCT instance_id::text AS instance_id FROM call_records WHERE instance_id <> ${instanceId}`
      for (const { instance_id } of instances) {
        const settled = yield* sweepInstance(instance_id)
        if (settled > 0) yield* Effect.logWarning(`call records: ${settled} calls of a stopped instance settled as interrupted`)
      }
    }).pipe(Effect.catchAllCause((cause) => Effect.logWarning("call records: sweep failed", cause)))
    yield* Effect.forkScoped(sweep.pipe(Effect.zipRight(Effect.sleep(sweepMs)), Effect.forever))

    // A clean stop settles its calls first (the listeners drain before services close): what is
    // left to delete goes with one last write.
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => opens.size + closes.size === 0 ? Effect.void : write([...opens.values()], [...closes])).pipe(Effect.ignore)
    )

    return { open, close } as const
  })
}) {
  /** Tests: records nothing (`opened` collects the calls' cut settlements, `closed` their ids). */
  static readonly test = (opened: Array<Settlement> = [], closed: Array<string> = []): Layer.Layer<CallRecords> =>
    Layer.succeed(CallRecords, CallRecords.make({
      open: (cut) => {
        opened.push(cut)
        return Effect.void
      },
      close: (id) => void closed.push(id)
    }))
}
