// Metering of tool calls: a per-platform counter per UTC calendar month; calls within the free
// tier (GATEWAY_FREE_TOOL_CALLS) cost nothing and write nothing else. A later call is paid
// before it runs: it passes checks 3 to 5 (suspension, budget, platform wallet) on the locked
// rows and is settled like inference (budget debit row, platform wallet debit, an `mcp_tool`
// log row) in the counter's transaction; a refused call runs not, counts not, costs nothing.
// The call's outcome (status, error, latency) is written on its log row once it is known.
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, Clock, Config, Effect, Either, Option } from "effect"
import type { PaymentRequired } from "../../schemas/Errors.js"
import { dec, sqlDec } from "../lib/Money.js"
import { isQueryCanceled } from "../lib/SqlErrors.js"
import { actorOf, BudgetLedger, type BudgetRow } from "../ledger/BudgetLedger.js"
import { DisplayLedger } from "../ledger/DisplayLedger.js"
import { heldOnBudgetSql, platformOpenHoldsUsd } from "../ledger/Holds.js"
import { insertLogRow, NOT_A_MODEL_CALL, recordLogOutcome } from "../ledger/InferenceLogs.js"
import { Settlements } from "../ledger/Settlements.js"
import type { EndUserPrincipal } from "../access/KeyAuth.js"
import { PlatformWallet } from "../ledger/PlatformWallet.js"
import { budgetExhausted, budgetRemains, notSuspended, walletRefusal, type WalletSettings } from "../pipeline/Preflight.js"

const ZERO = BigDecimal.make(0n, 0)

export const meteringConfig = Config.all({
  freeCalls: Config.integer("GATEWAY_FREE_TOOL_CALLS").pipe(Config.withDefault(1000)),
  price: Config.string("GATEWAY_TOOL_CALL_PRICE_USD").pipe(Config.withDefault("0.001"))
})

/** Which tool a call runs. */
export interface ToolCallName {
  readonly appSlug: string
  readonly tool: string
}

/** How a call ended, for its log row. */
export interface CallOutcome {
  readonly status: "success" | "error"
  readonly errorMessage: string | null
  readonly latencyMs: number
}

/**
 * A call's charge, taken before it runs: within the free tier; paid, with the log row that
 * records it; refused by checks 3 to 5; or not taken, the database failing (nothing written
 * in either case: the call does not run).
 */
export type Charge =
  | { readonly _tag: "Free" }
  | { readonly _tag: "Paid"; readonly logId: string }
  | { readonly _tag: "Refused"; readonly refusal: PaymentRequired }
  | { readonly _tag: "Unavailable" }

const FREE: Charge = { _tag: "Free" }

/** First day of the UTC calendar month of `at`, as a Postgres date literal. */
export const monthOf = (at: Date): string =>
  `${at.getUTCFullYear()}-${String(at.getUTCMonth() + 1).padStart(2, "0")}-01`

export const makeMetering = Effect.gen(function*() {
  const sql = yield* PgClient.PgClient
  const ledger = yield* BudgetLedger
  const wallet = yield* PlatformWallet
  const display = yield* DisplayLedger
  const settlements = yield* Settlements
  const config = yield* meteringConfig.pipe(Effect.orDie)
  const price = dec(config.price)
  const billable = BigDecimal.greaterThan(price, ZERO)

  /** Applies the display rule `tool_call` (every invocation, free tier or not) to the locked, active budget. */
  const chargeDisplay = (budget: Option.Option<BudgetRow>, settings: WalletSettings | null) =>
    Option.isSome(budget) ? display.charge(budget.value, settings, { costUsd: ZERO, inferenceCalls: 0, toolCalls: 1 }) : Effect.void

  /** The user's active budget, locked (after a due period reset), and the platform's display settings. */
  const lockBudget = (principal: EndUserPrincipal, now: Date) =>
    Effect.gen(function*() {
      const budget = yield* ledger.lockActive(principal.platformId, principal.endUserId, now)
      const settings = Option.isSome(budget) ? yield* display.walletSettings(principal.platformId) : null
      return { budget, settings }
    })

  /**
   * Checks 3 and 4 on the locked, active budget, its open capability holds and model-call
   * reservations counted. With budget_enforcement "reserve" what remains must pay the price
   * (the call's maximum cost), so a paid call never takes used_usd past max_usd either.
   */
  const budgetAllows = (budget: BudgetRow, settings: WalletSettings | null) =>
    Effect.gen(function*() {
      const [row] = yield* sql<{ readonly held: string; readonly enforcement: string | null }>`SELECT ${heldOnBudgetSql(sql, budget.id)}::text AS held,
        (SELECT settings->>'budget_enforcement' FROM platforms WHERE id = ${budget.platform_id}) AS enforcement`
      const held = dec(row?.held ?? "0")
      const remaining = BigDecimal.subtract(BigDecimal.subtract(dec(budget.max_usd), dec(budget.used_usd)), held)
      return Either.flatMap(notSuspended(budget), () =>
        row?.enforcement === "reserve" && BigDecimal.lessThan(remaining, price)
          ? Either.left(budgetExhausted())
          : budgetRemains(budget, held, settings))
    })

  /**
   * Check 5 on the locked wallet: its balance less what open capability holds and model-call
   * reservations keep for work in flight covers the price (the capability hold's rule), so a paid
   * call never takes money a call in flight will settle with. Locked first, then summed: a
   * reservation (which locks the wallet too) either committed before or waits for this debit.
   */
  const walletAllows = (platformId: string) =>
    Effect.gen(function*() {
      const [row] = yield* sql<{ readonly balance: string }>`SELECT balance_usd::text AS balance FROM platform_wallets
        WHERE platform_id = ${platformId} FOR UPDATE`
      if (row === undefined) return false
      const held = yield* platformOpenHoldsUsd(platformId).pipe(Effect.provideService(PgClient.PgClient, sql))
      return BigDecimal.greaterThanOrEqualTo(BigDecimal.subtract(dec(row.balance), held), price)
    })

  /**
   * Counts one call about to run and, past the free tier, pays for it. The counter row is
   * locked by the upsert until commit, so concurrent calls of a platform get distinct numbers;
   * the wallet debit is conditional on the balance, so concurrent paid calls never take it
   * below zero. Lock order (counter, budget, wallet) never inverts inference settlement's
   * (budget, wallet). A refusal fails the transaction: nothing of it is written.
   */
  const chargeInTransaction = (principal: EndUserPrincipal, name: ToolCallName, now: Date) =>
    Effect.gen(function*() {
      const metadata = { app: name.appSlug, tool: name.tool }
      const [counter] = yield* sql<{ readonly count: string }>`INSERT INTO tool_call_counters (platform_id, month, count)
        VALUES (${principal.platformId}, ${monthOf(now)}::date, 1)
        ON CONFLICT (platform_id, month) DO UPDATE SET count = tool_call_counters.count + 1
        RETURNING count::text`
      const { budget, settings } = yield* lockBudget(principal, now)
      const paid = Number(counter!.count) > config.freeCalls
      if (paid && billable && Option.isSome(budget)) {
        const allowed = yield* budgetAllows(budget.value, settings)
        if (Either.isLeft(allowed)) return yield* allowed.left
      }
      yield* chargeDisplay(budget, settings)
      if (!paid) return FREE
      const [row] = yield* insertLogRow(sql, {
        platform_id: principal.platformId, end_user_id: principal.endUserId, request_type: "mcp_tool",
        ...NOT_A_MODEL_CALL,
        latency_ms: 0,
        estimated_cost_usd: sqlDec(price),
        status: "success", error_message: null,
        billing_status: billable ? "billed" : "not_billed",
        metadata: { app_slug: name.appSlug, tool: name.tool },
        created_at: now
      })
      const logId = row!.id
      if (billable) {
        if (!(yield* walletAllows(principal.platformId))) return yield* walletRefusal(price, "tool call's price")
        // The wallet's ledger row names the log row it paid for (PlatformWallet.transactions).
        const covered = yield* wallet.debitIfCovered(principal.platformId, price, { ...metadata, request_type: "mcp_tool", log_id: logId })
        if (!covered) return yield* walletRefusal(price, "tool call's price")
        if (Option.isSome(budget)) {
          yield* ledger.debitLocked(budget.value, { amount: price, reason: "tool_call", metadata }, actorOf(principal), now)
        }
      }
      const charge: Charge = { _tag: "Paid", logId }
      return charge
    })

  /**
   * Before the call: counted, and paid when past the free tier (checks 3 to 5 first). This
   * instance's queued model-call settlements of the platform are written first, so the budget
   * and wallet read here hold every cost this instance knows of (a hybrid loop's earlier turns).
   */
  const charge = (principal: EndUserPrincipal, name: ToolCallName): Effect.Effect<Charge> =>
    Effect.gen(function*() {
      if (billable) yield* settlements.awaitPlatform(principal.platformId)
      const now = new Date(yield* Clock.currentTimeMillis)
      return yield* chargeInTransaction(principal, name, now).pipe(
        sql.withTransaction,
        Effect.retry({ while: isQueryCanceled, times: 3 }),
        Effect.catchTag("PaymentRequired", (refusal) => Effect.succeed<Charge>({ _tag: "Refused", refusal })),
        // A call that cannot be metered does not run: it would be unpaid, or unchecked.
        Effect.catchAllCause((cause) => Effect.logError("tool call metering failed", cause).pipe(Effect.as<Charge>({ _tag: "Unavailable" })))
      )
    }).pipe(
      Effect.uninterruptible,
      Effect.withSpan("ToolHost.charge", { attributes: { "tool.app": name.appSlug, "tool.name": name.tool } })
    )

  /** After the call: its outcome on the paid call's log row (free calls write nothing). */
  const record = (charged: Charge, outcome: CallOutcome) =>
    charged._tag !== "Paid"
      ? Effect.void
      : recordLogOutcome(sql, charged.logId, {
        status: outcome.status,
        error_message: outcome.errorMessage,
        latency_ms: Math.max(0, Math.round(outcome.latencyMs))
      }).pipe(
        // The call was paid already: a failure here is logged, not shown to the caller.
        Effect.catchAllCause((cause) => Effect.logError("tool call outcome not recorded", cause)),
        Effect.uninterruptible,
        Effect.withSpan("ToolHost.meter")
      )

  /** Skill tools are not metered, but the display rule `tool_call` applies to them too. */
  const displayOnly = (principal: EndUserPrincipal) =>
    Clock.currentTimeMillis.pipe(
      Effect.flatMap((ms) => lockBudget(principal, new Date(ms))),
      Effect.flatMap(({ budget, settings }) => chargeDisplay(budget, settings)),
      sql.withTransaction,
      Effect.retry({ while: isQueryCanceled, times: 3 }),
      Effect.catchAllCause((cause) => Effect.logError("tool call display charge failed", cause)),
      Effect.uninterruptible
    )

  return { charge, displayOnly, record } as const
})
