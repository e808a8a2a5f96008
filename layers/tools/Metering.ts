// Metering of executed tool calls: a per-platform counter per UTC calendar month; calls within
// the free tier (GATEWAY_FREE_TOOL_CALLS) cost nothing and write nothing else; later calls are
// settled like inference: budget debit row, platform wallet debit and an `mcp_tool` log row,
// all in the counter's transaction.
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, Clock, Config, Effect, Option } from "effect"
import { dec, sqlDec } from "../lib/Money.js"
import { isQueryCanceled } from "../lib/SqlErrors.js"
import { actorOf, BudgetLedger } from "../ledger/BudgetLedger.js"
import { DisplayLedger } from "../ledger/DisplayLedger.js"
import { insertLogRow, NOT_A_MODEL_CALL } from "../ledger/InferenceLogs.js"
import type { EndUserPrincipal } from "../access/KeyAuth.js"
import { PlatformWallet } from "../ledger/PlatformWallet.js"

const ZERO = BigDecimal.make(0n, 0)

export const meteringConfig = Config.all({
  freeCalls: Config.integer("GATEWAY_FREE_TOOL_CALLS").pipe(Config.withDefault(1000)),
  price: Config.string("GATEWAY_TOOL_CALL_PRICE_USD").pipe(Config.withDefault("0.001"))
})

export interface ExecutedCall {
  readonly appSlug: string
  readonly tool: string
  readonly status: "success" | "error"
  readonly errorMessage: string | null
  readonly latencyMs: number
}

/** First day of the UTC calendar month of `at`, as a Postgres date literal. */
export const monthOf = (at: Date): string =>
  `${at.getUTCFullYear()}-${String(at.getUTCMonth() + 1).padStart(2, "0")}-01`

export const makeMetering = Effect.gen(function*() {
  const sql = yield* PgClient.PgClient
  const ledger = yield* BudgetLedger
  const wallet = yield* PlatformWallet
  const display = yield* DisplayLedger
  const config = yield* meteringConfig.pipe(Effect.orDie)
  const price = dec(config.price)
  const billable = BigDecimal.greaterThan(price, ZERO)

  /**
   * Counts one executed call and settles it when it is past the free tier. The counter row is
   * locked by the upsert until commit, so concurrent calls of a platform get distinct numbers.
   * Lock order (counter, budget, wallet) never inverts inference settlement's (budget, wallet).
   */
  /**
   * Locks the user's active budget and applies the display rule `tool_call` (every invocation,
   * free tier or not); returns the locked budget for the paid path. Inside the caller's transaction.
   */
  const chargeDisplay = (principal: EndUserPrincipal, now: Date) =>
    Effect.gen(function*() {
      const budget = yield* ledger.lockActive(principal.platformId, principal.endUserId, now)
      if (Option.isSome(budget)) {
        const settings = yield* display.walletSettings(principal.platformId)
        yield* display.charge(budget.value, settings, { costUsd: ZERO, inferenceCalls: 0, toolCalls: 1 })
      }
      return budget
    })

  const record = (principal: EndUserPrincipal, call: ExecutedCall) =>
    Effect.gen(function*() {
      const now = new Date(yield* Clock.currentTimeMillis)
      const metadata = { app: call.appSlug, tool: call.tool }
      yield* Effect.gen(function*() {
        const [counter] = yield* sql<{ readonly count: string }>`INSERT INTO tool_call_counters (platform_id, month, count)
          VALUES (${principal.platformId}, ${monthOf(now)}::date, 1)
          ON CONFLICT (platform_id, month) DO UPDATE SET count = tool_call_counters.count + 1
          RETURNING count::text`
        const budget = yield* chargeDisplay(principal, now)
        if (Number(counter!.count) <= config.freeCalls) return
        if (billable) {
          if (Option.isSome(budget)) {
            yield* ledger.debitLocked(budget.value, { amount: price, reason: "tool_call", metadata }, actorOf(principal), now)
          }
          yield* wallet.debit(principal.platformId, price, { ...metadata, request_type: "mcp_tool" })
        }
        yield* insertLogRow(sql, {
          platform_id: principal.platformId, end_user_id: principal.endUserId, request_type: "mcp_tool",
          ...NOT_A_MODEL_CALL,
          latency_ms: Math.max(0, Math.round(call.latencyMs)),
          estimated_cost_usd: sqlDec(price),
          status: call.status, error_message: call.errorMessage,
          billing_status: billable ? "billed" : "not_billed",
          metadata: { app_slug: call.appSlug, tool: call.tool },
          created_at: now
        })
      }).pipe(sql.withTransaction, Effect.retry({ while: isQueryCanceled, times: 3 }), Effect.orDie)
    }).pipe(
      // Like inference settlement: the call already happened, so a failure here is logged, not
      // shown to the caller, and the settlement is never cut half-way by an interruption.
      Effect.catchAllCause((cause) => Effect.logError("tool call metering failed", cause)),
      Effect.uninterruptible,
      Effect.withSpan("ToolHost.meter", { attributes: { "tool.app": call.appSlug, "tool.name": call.tool } })
    )

  /** Skill tools are not metered, but the display rule `tool_call` applies to them too. */
  const displayOnly = (principal: EndUserPrincipal) =>
    Clock.currentTimeMillis.pipe(
      Effect.flatMap((ms) => chargeDisplay(principal, new Date(ms))),
      sql.withTransaction,
      Effect.retry({ while: isQueryCanceled, times: 3 }),
      Effect.catchAllCause((cause) => Effect.logError("tool call display charge failed", cause)),
      Effect.uninterruptible
    )

  return { displayOnly, record } as const
})
