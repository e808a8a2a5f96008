// settle_at_once is installed at start from layers/ledger/SettleAtOnce.ts, not by a migration:
// installing it again changes nothing, instances installing it at once take turns and leave one
// definition, and a database holding another definition (as migration 0012 made it) gets this one.
import { expect, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Effect, Fiber, Layer, Schedule } from "effect"
import { INSTALL_LOCK, installSettleAtOnce, SETTLE_AT_ONCE_BODY } from "../layers/ledger/SettleAtOnce.js"
import { DatabaseLive } from "../layers/platform/Database.js"
import { TestDatabaseUrlLive } from "./support/TestDatabase.js"

const TestLayer = DatabaseLive.pipe(Layer.provide(TestDatabaseUrlLive))

/** Every settle_at_once in the database, and whether its source is this release's. */
const definitions = Effect.flatMap(PgClient.PgClient, (sql) =>
  sql<{ readonly current: boolean }>`SELECT prosrc = ${SETTLE_AT_ONCE_BODY} AS current FROM pg_proc WHERE proname = 'settle_at_once'`)

/**
 * Runs two installers together while another session holds the install lock, releases it once
 * both wait on it (so they contend), and returns what each answered.
 */
const installTwiceAtOnce = Effect.gen(function*() {
  const sql = yield* PgClient.PgClient
  const holder = yield* sql.reserve
  yield* holder.executeUnprepared(`SELECT pg_advisory_lock(${INSTALL_LOCK})`, [], undefined)
  const both = yield* Effect.fork(Effect.all([installSettleAtOnce, installSettleAtOnce], { concurrency: 2 }))
  yield* sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_locks
      WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`.pipe(
    Effect.repeat({ schedule: Schedule.spaced("10 millis"), until: ([row]) => row!.n >= 2 })
  )
  yield* holder.executeUnprepared(`SELECT pg_advisory_unlock(${INSTALL_LOCK})`, [], undefined)
  return yield* Fiber.join(both)
}).pipe(Effect.scoped)

// The real clock: the wait for both installers to queue on the lock polls on it.
layer(TestLayer, { timeout: "60 seconds", excludeTestServices: true })("settle_at_once installer", (it) => {
  it.effect("the migrations leave it to the installer; a second install changes nothing", () =>
    Effect.gen(function*() {
      expect(yield* definitions).toEqual([])
      expect(yield* installSettleAtOnce).toBe(true)
      expect(yield* installSettleAtOnce).toBe(false)
      expect(yield* definitions).toEqual([{ current: true }])
    }))

  it.effect("two instances installing at once both succeed and leave one definition", () =>
    Effect.gen(function*() {
      const sql = yield* PgClient.PgClient
      yield* sql`DROP FUNCTION IF EXISTS settle_at_once(jsonb)`
      const answers = yield* installTwiceAtOnce
      expect([...answers].sort()).toEqual([false, true])
      expect(yield* definitions).toEqual([{ current: true }])
    }))

  it.effect("another definition is replaced, once, by instances installing at once", () =>
    Effect.gen(function*() {
      const sql = yield* PgClient.PgClient
      yield* sql`CREATE OR REPLACE FUNCTION settle_at_once(settlements jsonb) RETURNS boolean LANGUAGE plpgsql
        AS $fn$ BEGIN RETURN false; END $fn$`
      expect(yield* definitions).toEqual([{ current: false }])
      const answers = yield* installTwiceAtOnce
      expect([...answers].sort()).toEqual([false, true])
      expect(yield* definitions).toEqual([{ current: true }])
    }))
})
