// Settlements as a unit over a fresh database: a group whose calls straddle a budget period
// boundary resets the budget between them (the same rows as settling them one by one), a call
// submitted twice is written once, and the running totals count what was queued.
import { expect, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, ConfigProvider, Effect, Layer, Option } from "effect"
import { randomUUID } from "node:crypto"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { ApiKeys } from "../../layers/ApiKeys.js"
import { BudgetLedger } from "../../layers/BudgetLedger.js"
import { DatabaseLive } from "../../layers/Database.js"
import { EndUsers } from "../../layers/EndUsers.js"
import { KeyAuth } from "../../layers/KeyAuth.js"
import { Platforms } from "../../layers/Platforms.js"
import { PlatformWallet } from "../../layers/PlatformWallet.js"
import { type Settlement, Settlements } from "../../layers/Settlements.js"
import { WebhookOutbox } from "../../layers/WebhookOutbox.js"
import { dec } from "../../src/lib/Money.js"
import { TestDatabaseUrlLive } from "../support/TestDatabase.js"

/** Only what the ledger calls; anything else dies loudly. */
const onlyThese = <T extends object>(impl: Partial<T>): T =>
  new Proxy(impl, {
    get: (target, name) => name in target ? (target as any)[name] : () => Effect.dieMessage(`not stubbed: ${String(name)}`)
  }) as T

const QuietOutbox = Layer.succeed(
  WebhookOutbox,
  WebhookOutbox.make(onlyThese<WebhookOutbox>({ enqueue: () => Effect.void, subscribedTypes: () => Effect.succeed(() => false) }))
)
const KeyAuthStub = Layer.succeed(KeyAuth, KeyAuth.make(onlyThese<KeyAuth>({ invalidate: () => Effect.void })))

const TestLayer = Layer.mergeAll(Platforms.Default, EndUsers.Default, Settlements.Default).pipe(
  Layer.provideMerge(Layer.mergeAll(ApiKeys.Default, BudgetLedger.Default, PlatformWallet.Default)),
  Layer.provideMerge(Layer.mergeAll(KeyAuthStub, QuietOutbox)),
  Layer.provideMerge(DatabaseLive),
  Layer.provide(TestDatabaseUrlLive),
  Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["GATEWAY_DATA_DIR", mkdtempSync(join(tmpdir(), "settlements-test-"))]]))))
)

const actor = { type: "system", keyId: null } as const
const usd = (n: string) => BigDecimal.unsafeFromString(n)

const settlementOf = (platformId: string, endUserId: string, cost: string, at: Date, id = randomUUID()): Settlement => ({
  id,
  platformId,
  endUserId,
  costUsd: usd(cost),
  at,
  log: {
    request_type: "chat.completion",
    provider_id: randomUUID(),
    model_id: randomUUID(),
    model_slug: "m",
    provider_model_id: "m-1",
    prompt_tokens: 1,
    completion_tokens: 1,
    total_tokens: 2,
    latency_ms: 1,
    status: "success",
    error_message: null,
    token_count_method: "reported",
    metadata: {}
  },
  details: { request_id: id },
  actor,
  displaySettings: null,
  parent: Option.none()
})

const setup = (name: string) =>
  Effect.gen(function*() {
    const { platform } = yield* (yield* Platforms).create({ name })
    const { user } = yield* (yield* EndUsers).create(platform.id, { external_id: name }, actor)
    yield* (yield* PlatformWallet).topup(platform.id, usd("10"), null)
    return { platformId: platform.id, endUserId: user.id }
  })

layer(TestLayer, { timeout: "60 seconds", excludeTestServices: true })("Settlements", (it) => {
  it.effect("a group that straddles a daily period boundary resets the budget between its calls", () =>
    Effect.gen(function*() {
      const sql = yield* PgClient.PgClient
      const ledger = yield* BudgetLedger
      const settlements = yield* Settlements
      const { platformId, endUserId } = yield* setup("boundary")
      const budget = yield* ledger.create(platformId, endUserId, { max_usd: usd("5"), period: "daily", auto_replenish: false }, actor)
      // The current period ends one minute from now.
      const now = Date.now()
      const start = new Date(now - 24 * 3600_000 + 60_000)
      yield* sql`UPDATE budgets SET period_start = ${start}, period_anchor = ${start} WHERE id = ${budget.id}`

      const before = settlementOf(platformId, endUserId, "0.25", new Date(now))
      const after = settlementOf(platformId, endUserId, "0.5", new Date(now + 120_000))
      // Submitted back to back: the writer takes both into one group.
      yield* settlements.submit(before)
      yield* settlements.submit(after)
      yield* settlements.awaitEverything("10 seconds")

      const rows = yield* sql<{ type: string; reason: string | null; amount_usd: string; used_usd_before: string; used_usd_after: string }>`
        SELECT type, reason, amount_usd::text, used_usd_before::text, used_usd_after::text FROM budget_transactions
        WHERE budget_id = ${budget.id} ORDER BY created_at, seq`
      expect(rows.map((r) => [r.type, r.reason])).toEqual([["opening", null], ["debit", "inference"], ["adjustment", "period_reset"], ["debit", "inference"]])
      expect(BigDecimal.format(dec(rows[1]!.used_usd_after))).toBe("0.25")
      expect(BigDecimal.format(dec(rows[2]!.used_usd_before))).toBe("0.25")
      expect(BigDecimal.format(dec(rows[3]!.used_usd_before))).toBe("0")
      expect(BigDecimal.format(dec(rows[3]!.used_usd_after))).toBe("0.5")
      const [live] = yield* sql<{ used: string; period_start: Date }>`SELECT used_usd::text AS used, period_start FROM budgets WHERE id = ${budget.id}`
      expect(BigDecimal.format(dec(live!.used))).toBe("0.5")
      expect(live!.period_start.getTime()).toBe(start.getTime() + 24 * 3600_000)
    }))

  it.effect("a settlement submitted twice is written once; the running totals count what was queued", () =>
    Effect.gen(function*() {
      const sql = yield* PgClient.PgClient
      const ledger = yield* BudgetLedger
      const settlements = yield* Settlements
      const { platformId, endUserId } = yield* setup("twice")
      yield* ledger.create(platformId, endUserId, { max_usd: usd("5"), period: "one_time", auto_replenish: false }, actor)
      const totalsBefore = settlements.submitted(platformId, endUserId)
      const once = settlementOf(platformId, endUserId, "0.125", new Date())
      yield* settlements.submit(once)
      // Admission brackets what was queued between two readings of the running totals.
      const totalsAfter = settlements.submitted(platformId, endUserId)
      expect(BigDecimal.format(BigDecimal.subtract(totalsAfter.budget, totalsBefore.budget))).toBe("0.125")
      expect(BigDecimal.format(BigDecimal.subtract(totalsAfter.wallet, totalsBefore.wallet))).toBe("0.125")
      yield* settlements.awaitEverything("10 seconds")
      // A retry of the same settlement (same id) finds its log row and applies nothing.
      yield* settlements.submit(once)
      yield* settlements.awaitEverything("10 seconds")

      const [logs] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM inference_logs WHERE id = ${once.id}`
      expect(logs!.n).toBe(1)
      const [debits] = yield* sql<{ n: number; sum: string }>`SELECT count(*)::int AS n, sum(amount_usd)::text AS sum
        FROM budget_transactions WHERE platform_id = ${platformId} AND type = 'debit'`
      expect(debits!.n).toBe(1)
      const [wallet] = yield* sql<{ n: number; balance: string }>`SELECT
          (SELECT count(*)::int FROM platform_wallet_transactions WHERE platform_id = ${platformId} AND type = 'debit') AS n,
          (SELECT balance_usd::text FROM platform_wallets WHERE platform_id = ${platformId}) AS balance`
      expect(wallet!.n).toBe(1)
      expect(BigDecimal.format(dec(wallet!.balance))).toBe("9.875")
    }))

  it.effect("a group of several end users: each budget gets its own debits, chained in order", () =>
    Effect.gen(function*() {
      const sql = yield* PgClient.PgClient
      const ledger = yield* BudgetLedger
      const settlements = yield* Settlements
      const { platformId, endUserId: first } = yield* setup("many")
      const users = [first]
      for (const name of ["many-2", "many-3"]) users.push((yield* (yield* EndUsers).create(platformId, { external_id: name }, actor)).user.id)
      for (const user of users) yield* ledger.create(platformId, user, { max_usd: usd("5"), period: "one_time", auto_replenish: false }, actor)
      // One without a budget: logged and debited from the wallet only.
      const unbudgeted = (yield* (yield* EndUsers).create(platformId, { external_id: "many-none" }, actor)).user.id
      const costs = ["0.1", "0.02", "0.003"]
      // Submitted back to back: the writer takes them into one group.
      for (let round = 0; round < 2; round++) {
        for (const [i, user] of users.entries()) yield* settlements.submit(settlementOf(platformId, user, costs[i]!, new Date()))
      }
      yield* settlements.submit(settlementOf(platformId, unbudgeted, "1", new Date()))
      yield* settlements.awaitEverything("10 seconds")

      for (const [i, user] of users.entries()) {
        const rows = yield* sql<{ amount: string; before: string; after: string }>`SELECT t.amount_usd::text AS amount,
            t.used_usd_before::text AS before, t.used_usd_after::text AS after
          FROM budget_transactions t JOIN budgets b ON b.id = t.budget_id
          WHERE b.end_user_id = ${user} AND t.type = 'debit' ORDER BY t.seq`
        const cost = dec(costs[i]!)
        expect(rows.map((r) => [r.amount, r.before, r.after].map((v) => BigDecimal.format(dec(v))))).toEqual([
          [BigDecimal.format(cost), "0", BigDecimal.format(cost)],
          [BigDecimal.format(cost), BigDecimal.format(cost), BigDecimal.format(BigDecimal.sum(cost, cost))]
        ])
        const [budget] = yield* sql<{ used: string }>`SELECT used_usd::text AS used FROM budgets WHERE end_user_id = ${user}`
        expect(BigDecimal.format(dec(budget!.used))).toBe(BigDecimal.format(BigDecimal.sum(cost, cost)))
      }
      const [wallet] = yield* sql<{ n: number; balance: string }>`SELECT
          (SELECT count(*)::int FROM platform_wallet_transactions WHERE platform_id = ${platformId} AND type = 'debit') AS n,
          (SELECT balance_usd::text FROM platform_wallets WHERE platform_id = ${platformId}) AS balance`
      expect(wallet!.n).toBe(7)
      expect(BigDecimal.format(dec(wallet!.balance))).toBe("8.754")
    }))
})
