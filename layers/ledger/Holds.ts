// Budget holds of capability runs: an `open` capability_runs row reserves hold_usd on its budget
// until it settles. Other pre-flights (inference) subtract `openHoldsSql` from remaining_usd;
// runs and paid tool calls also count model calls' reservations (`heldOnBudgetSql`).
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

/**
 * SQL fragment: what a budget holds for work in flight, read after locking it: open capability
 * runs, and the unexpired reservations of model calls (budget_enforcement "reserve"), so a run or
 * a paid tool call never takes money a model call reserved.
 */
export const heldOnBudgetSql = (sql: PgClient.PgClient, budgetId: string) =>
  sql`(${openHoldsSql(sql, budgetId)} + (SELECT coalesce(sum(amount_usd), 0) FROM budget_reservations
        WHERE budget_id = ${budgetId} AND expires_at > now()))`

/** The USD held by open, unexpired runs and model-call reservations across a platform (checked against its wallet). */
export const platformOpenHoldsUsd = (platformId: string): Effect.Effect<BigDecimal.BigDecimal, never, PgClient.PgClient> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const [row] = yield* sql<{ held: string }>`SELECT ((SELECT coalesce(sum(hold_usd), 0) FROM capability_runs
        WHERE platform_id = ${platformId} AND state = 'open' AND expires_at > now())
      + (SELECT coalesce(sum(amount_usd), 0) FROM budget_reservations
        WHERE platform_id = ${platformId} AND expires_at > now()))::text AS held`
    return dec(row?.held ?? "0")
  }).pipe(Effect.orDie)
