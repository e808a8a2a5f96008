// Budget holds of capability runs: an `open` capability_runs row reserves hold_usd on its budget
// until it settles. Other pre-flights (inference) subtract `openHoldsSql` from remaining_usd.
import type { Statement } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import type { BigDecimal } from "effect"
import { Effect } from "effect"
import { dec } from "../lib/Money.js"

/**
 * SQL fragment: the USD held on a budget by open, unexpired runs (numeric, 0 when none). An
 * expired open row is a crashed run waiting for the sweeper; it no longer holds money, so a
 * crash can never lock a budget for longer than the run timeout plus the grace period.
 * Usage: sql`SELECT ... , ${openHoldsSql(sql, budgetIdColumnOrValue)} AS held`.
 */
export const openHoldsSql = (sql: PgClient.PgClient, budgetId: string | Statement.Fragment) =>
  sql`(SELECT coalesce(sum(hold_usd), 0) FROM capability_runs
        WHERE budget_id = ${budgetId} AND state = 'open' AND expires_at > now())`

/** The USD held by open, unexpired runs across a platform (checked against its wallet). */
export const platformOpenHoldsUsd = (platformId: string): Effect.Effect<BigDecimal.BigDecimal, never, PgClient.PgClient> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const [row] = yield* sql<{ held: string }>`SELECT coalesce(sum(hold_usd), 0)::text AS held FROM capability_runs
      WHERE platform_id = ${platformId} AND state = 'open' AND expires_at > now()`
    return dec(row?.held ?? "0")
  }).pipe(Effect.orDie)
