// Settlements as a unit over a fresh database: a group whose calls straddle a budget period
// boundary resets the budget between them (the same rows as settling them one by one), a call
// submitted twice is written once, and the running totals count what was queued; the one
// statement of the common case writes exactly what the transaction writes, leaves to the
// transaction what it cannot write, and chains exactly when two writers debit the same budgets.
import { expect, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, ConfigProvider, Context, Effect, Layer, Metric, Option, Schedule } from "effect"
import { randomUUID } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { ApiKeys } from "../../layers/tenancy/ApiKeys.js"
import { BudgetLedger } from "../../layers/ledger/BudgetLedger.js"
import { DatabaseLive } from "../../layers/platform/Database.js"
import { EndUsers } from "../../layers/tenancy/EndUsers.js"
import { KeyAuth } from "../../layers/access/KeyAuth.js"
import { Platforms } from "../../layers/tenancy/Platforms.js"
import { PlatformWallet } from "../../layers/ledger/PlatformWallet.js"
import { settlementGroups, taggedBy } from "../../layers/platform/Metrics.js"
import type { BudgetExpectation, Settlement } from "../../layers/ledger/Settlement.js"
import { Settlements } from "../../layers/ledger/Settlements.js"
import { WebhookOutbox } from "../../layers/ledger/WebhookOutbox.js"
import { dec } from "../../layers/lib/Money.js"
import { nextPeriodStart } from "../../layers/lib/Periods.js"
import { TestDatabaseUrlLive } from "../support/TestDatabase.js"

/** No endpoint wants any event: settlement enqueues none. */
const QuietOutbox = WebhookOutbox.test([], () => false)
const KeyAuthStub = KeyAuth.test()

/** `config` with a data dir of its own (the settlement journal's), removed when the layer is. */
const configWithDataDir = (config: ReadonlyArray<readonly [string, string]>) =>
  Layer.unwrapScoped(Effect.map(
    Effect.acquireRelease(
      Effect.sync(() => mkdtempSync(join(tmpdir(), "settlements-test-"))),
      (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
    ),
    (dir) => Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["GATEWAY_DATA_DIR", dir], ...config])))
  ))

const layerWith = (config: ReadonlyArray<readonly [string, string]>) =>
  Layer.mergeAll(Platforms.DefaultWithoutDependencies, EndUsers.DefaultWithoutDependencies, Settlements.DefaultWithoutDependencies).pipe(
    Layer.provideMerge(Layer.mergeAll(ApiKeys.DefaultWithoutDependencies, BudgetLedger.DefaultWithoutDependencies, PlatformWallet.Default)),
    Layer.provideMerge(Layer.mergeAll(KeyAuthStub, QuietOutbox)),
    Layer.provideMerge(DatabaseLive),
    Layer.provide(TestDatabaseUrlLive),
    Layer.provide(configWithDataDir(config))
  )
const TestLayer = layerWith([])

const actor = { type: "system", keyId: null } as const
const usd = (n: string) => BigDecimal.unsafeFromString(n)

const settlementOf = (platformId: string, endUserId: string | null, cost: string, at: Date, id = randomUUID()): Settlement => ({
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

  it.effect("the one statement writes exactly what the transaction writes", () =>
    Effect.gen(function*() {
      const sql = yield* PgClient.PgClient
      const at = Date.now()
      /** One tenant's calls: two budgeted users, one without a budget, a platform key, a free call. */
      const run = (name: string, expect: boolean) =>
        Effect.gen(function*() {
          const { platformId, endUserId: first } = yield* setup(name)
          const second = (yield* (yield* EndUsers).create(platformId, { external_id: `${name}-2` }, actor)).user.id
          const none = (yield* (yield* EndUsers).create(platformId, { external_id: `${name}-none` }, actor)).user.id
          const budgets = new Map<string, BudgetExpectation>()
          for (const user of [first, second]) budgets.set(user, yield* expectationOf(user, "5", "monthly"))
          const calls: Array<[string | null, string]> = [[first, "0.1"], [second, "0.02"], [first, "0.3"], [none, "1"], [null, "0.5"], [first, "0"], [second, "0.007"]]
          const group = calls.map(([user, cost], i) => {
            const settlement = settlementOf(platformId, user, cost, new Date(at + i))
            return { ...settlement, budget: expect ? user === null ? undefined : budgets.get(user) ?? null : undefined }
          })
          yield* submitAll(group)
          return { platformId, users: [first, second, none] }
        })
      const statements = yield* groupCount("statement")
      const transactions = yield* groupCount("transaction")
      const byStatement = yield* run("at-once", true)
      expect(yield* groupCount("statement")).toBe(statements + 1)
      const byTransaction = yield* run("in-transaction", false)
      expect(yield* groupCount("transaction")).toBe(transactions + 1)

      /** What a tenant's ledger holds, without its ids. */
      const written = ({ platformId, users }: { platformId: string; users: ReadonlyArray<string> }) =>
        Effect.gen(function*() {
          const user = (id: string | null) => id === null ? null : users.indexOf(id)
          const logs = yield* sql<Record<string, unknown>>`SELECT end_user_id, estimated_cost_usd::text AS cost, billing_status,
              prompt_tokens, status, created_at FROM inference_logs WHERE platform_id = ${platformId} ORDER BY created_at`
          const debits = yield* sql<Record<string, string>>`SELECT b.end_user_id, t.amount_usd::text AS amount, t.max_usd_before::text AS max_before,
              t.max_usd_after::text AS max_after, t.used_usd_before::text AS before, t.used_usd_after::text AS after,
              t.reason, t.actor_type, t.metadata, t.created_at
            FROM budget_transactions t JOIN budgets b ON b.id = t.budget_id
            WHERE t.platform_id = ${platformId} AND t.type = 'debit' ORDER BY t.seq`
          const budgets = yield* sql<Record<string, unknown>>`SELECT end_user_id, used_usd::text AS used, low_balance_armed, updated_at
            FROM budgets WHERE platform_id = ${platformId} ORDER BY end_user_id`
          const wallet = yield* sql<Record<string, string>>`SELECT amount_usd::text AS amount, balance_before::text AS before,
              balance_after::text AS after, metadata FROM platform_wallet_transactions
            WHERE platform_id = ${platformId} AND type = 'debit' ORDER BY seq`
          const money = (v: unknown) => BigDecimal.format(dec(String(v)))
          return {
            logs: logs.map((r) => ({ ...r, end_user_id: user(r.end_user_id as string | null), cost: money(r.cost) })),
            // In ledger order per budget (across budgets, the order follows the users' random ids).
            debits: debits.map((r) => ({
              ...r,
              end_user_id: user(r.end_user_id!),
              amount: money(r.amount),
              max_before: money(r.max_before),
              max_after: money(r.max_after),
              before: money(r.before),
              after: money(r.after),
              metadata: { ...(r.metadata as unknown as Record<string, unknown>), request_id: "-" }
            })).sort((a, b) => Number(a.end_user_id) - Number(b.end_user_id)),
            budgets: budgets.map((r) => ({ ...r, end_user_id: user(r.end_user_id as string), used: money(r.used) }))
              .sort((a, b) => Number(a.end_user_id) - Number(b.end_user_id)),
            wallet: wallet.map((r) => ({ ...r, amount: money(r.amount), before: money(r.before), after: money(r.after), metadata: "-" }))
          }
        })
      const expected = yield* written(byTransaction)
      expect(expected.debits).toHaveLength(4)
      expect(expected.wallet).toHaveLength(6)
      expect(yield* written(byStatement)).toEqual(expected)
    }))

  it.effect("what the one statement cannot write (a replaced budget, a low-balance crossing, a debit webhook) the transaction writes", () =>
    Effect.gen(function*() {
      const sql = yield* PgClient.PgClient
      const ledger = yield* BudgetLedger
      const { platformId, endUserId } = yield* setup("fallback")
      // Admission saw one budget; it was replaced before the call settled.
      const seen = yield* expectationOf(endUserId, "5", "one_time")
      yield* ledger.remove(platformId, endUserId, actor)
      const replaced = yield* ledger.create(platformId, endUserId, { max_usd: usd("3"), period: "one_time", auto_replenish: false }, actor)
      let transactions = yield* groupCount("transaction")
      yield* submitAll([{ ...settlementOf(platformId, endUserId, "0.5", new Date()), budget: seen }])
      expect(yield* groupCount("transaction")).toBe(transactions + 1)
      const [used] = yield* sql<{ used: string }>`SELECT used_usd::text AS used FROM budgets WHERE id = ${replaced.id}`
      expect(BigDecimal.format(dec(used!.used))).toBe("0.5")

      // Remaining 2.5 with a threshold of 2: a debit of 1 crosses it.
      yield* sql`UPDATE budgets SET low_balance_threshold = 2 WHERE id = ${replaced.id}`
      const current = { id: replaced.id, periodStart: replaced.period_start, periodEnd: null }
      transactions = yield* groupCount("transaction")
      yield* submitAll([{ ...settlementOf(platformId, endUserId, "1", new Date()), budget: current }])
      expect(yield* groupCount("transaction")).toBe(transactions + 1)
      const [armed] = yield* sql<{ armed: boolean }>`SELECT low_balance_armed AS armed FROM budgets WHERE id = ${replaced.id}`
      expect(armed!.armed).toBe(false)

      // An endpoint wants budget.debited: every debit raises an event, which the transaction writes.
      yield* sql`INSERT INTO webhook_endpoints (platform_id, url, secret_encrypted, event_types)
        VALUES (${platformId}, 'https://example.com/hook', 'x', ${"{budget.debited}"}::text[])`
      transactions = yield* groupCount("transaction")
      yield* submitAll([{ ...settlementOf(platformId, endUserId, "0.25", new Date()), budget: current }])
      expect(yield* groupCount("transaction")).toBe(transactions + 1)
      const [total] = yield* sql<{ used: string; debits: number }>`SELECT used_usd::text AS used,
          (SELECT count(*)::int FROM budget_transactions WHERE budget_id = ${replaced.id} AND type = 'debit') AS debits
        FROM budgets WHERE id = ${replaced.id}`
      expect(BigDecimal.format(dec(total!.used))).toBe("1.75")
      expect(total!.debits).toBe(3)
    }))

  it.effect("two writers debiting the same budgets at once: exact totals, one chain", () =>
    Effect.gen(function*() {
      const sql = yield* PgClient.PgClient
      const first = yield* Settlements
      const second = Context.get(yield* Layer.build(Layer.fresh(Settlements.DefaultWithoutDependencies)), Settlements)
      const { platformId, endUserId } = yield* setup("two-writers")
      const budget = yield* expectationOf(endUserId, "1000", "daily")
      const calls = Array.from({ length: 120 }, (_, i) => ({
        ...settlementOf(platformId, endUserId, `0.00${(i % 9) + 1}`, new Date()),
        budget
      }))
      const statements = yield* groupCount("statement")
      yield* Effect.forEach(calls, (call, i) => (i % 2 === 0 ? first : second).submit(call), { discard: true })
      yield* first.awaitEverything("20 seconds")
      yield* second.awaitEverything("20 seconds")
      expect(yield* groupCount("statement")).toBeGreaterThan(statements + 1)

      const total = calls.reduce((sum, call) => BigDecimal.sum(sum, call.costUsd), BigDecimal.make(0n, 0))
      const [row] = yield* sql<{ used: string; debits: number; sum: string; chained: boolean; wallet: string }>`SELECT b.used_usd::text AS used,
          (SELECT count(*)::int FROM budget_transactions t WHERE t.budget_id = b.id AND t.type = 'debit') AS debits,
          (SELECT sum(amount_usd)::text FROM budget_transactions t WHERE t.budget_id = b.id AND t.type = 'debit') AS sum,
          (SELECT bool_and(t.used_usd_before = coalesce(t.prev, 0)) FROM (SELECT used_usd_before,
              lag(used_usd_after) OVER (ORDER BY seq) AS prev FROM budget_transactions WHERE budget_id = b.id) t) AS chained,
          (SELECT balance_usd::text FROM platform_wallets WHERE platform_id = b.platform_id) AS wallet
        FROM budgets b WHERE b.id = ${budget.id}`
      expect(BigDecimal.format(dec(row!.used))).toBe(BigDecimal.format(total))
      expect(BigDecimal.format(dec(row!.sum))).toBe(BigDecimal.format(total))
      expect(row!.debits).toBe(120)
      expect(row!.chained).toBe(true)
      expect(BigDecimal.format(dec(row!.wallet))).toBe(BigDecimal.format(BigDecimal.subtract(usd("10"), total)))
      const [walletChain] = yield* sql<{ chained: boolean }>`SELECT bool_and(balance_before = coalesce(prev, balance_before)) AS chained
        FROM (SELECT balance_before, lag(balance_after) OVER (ORDER BY seq) AS prev
          FROM platform_wallet_transactions WHERE platform_id = ${platformId}) t`
      expect(walletChain!.chained).toBe(true)
    }).pipe(Effect.scoped))
})

/** A live budget for the user and how admission sees it. */
const expectationOf = (endUserId: string, maxUsd: string, period: "one_time" | "daily" | "monthly") =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const [user] = yield* sql<{ platform_id: string }>`SELECT platform_id FROM end_users WHERE id = ${endUserId}`
    const row = yield* (yield* BudgetLedger).create(user!.platform_id, endUserId, { max_usd: usd(maxUsd), period, auto_replenish: false }, actor)
    const [budget] = yield* sql<{ period_start: Date; period_anchor: Date }>`SELECT period_start, period_anchor FROM budgets WHERE id = ${row.id}`
    return { id: row.id, periodStart: budget!.period_start, periodEnd: nextPeriodStart(period, budget!.period_anchor, budget!.period_start) }
  })

/** Submits the settlements back to back (the writer takes them into one group) and waits for them. */
const submitAll = (group: ReadonlyArray<Settlement>) =>
  Effect.gen(function*() {
    const settlements = yield* Settlements
    for (const settlement of group) yield* settlements.submit(settlement)
    yield* settlements.awaitEverything("10 seconds")
  })

const groupsBy = taggedBy(settlementGroups, "path")
const groupCount = (path: "statement" | "transaction") => Effect.map(Metric.value(groupsBy(path)), (state) => state.count as number)

// The writer's wait at low load (GATEWAY_SETTLEMENT_LINGER) made an hour long: what ends it
// early is all that can get a settlement written within the tests' time.
layer(layerWith([["GATEWAY_SETTLEMENT_LINGER", "1h"]]), { timeout: "60 seconds", excludeTestServices: true })(
  "Settlements, the writer's wait at low load",
  (it) => {
    const logCount = (platformId: string) =>
      Effect.flatMap(PgClient.PgClient, (sql) =>
        Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM inference_logs WHERE platform_id = ${platformId}`, (rows) => rows[0]!.n))

    it.effect("a reader waiting for its platform's settlements ends the wait: they are written at once", () =>
      Effect.gen(function*() {
        const settlements = yield* Settlements
        const { platformId, endUserId } = yield* setup("hurried")
        yield* settlements.submit(settlementOf(platformId, endUserId, "0.125", new Date()))
        // awaitPlatform gives up after its limit; without the hurry the row would still be queued then.
        yield* settlements.awaitPlatform(platformId, undefined, "20 seconds")
        expect(yield* logCount(platformId)).toBe(1)
      }))

    it.effect("a group's worth of queued settlements ends the wait without any reader", () =>
      Effect.gen(function*() {
        const settlements = yield* Settlements
        const { platformId, endUserId } = yield* setup("full")
        // The first is taken alone and waited on; sixteen more make a group's worth.
        for (let i = 0; i < 17; i++) yield* settlements.submit(settlementOf(platformId, endUserId, "0.01", new Date()))
        // Polled from the database (awaiting through the service would hurry the writer itself).
        const written = yield* logCount(platformId).pipe(
          Effect.filterOrFail((n) => n === 17, (n) => `${n} of 17 written`),
          Effect.retry(Schedule.spaced("50 millis").pipe(Schedule.upTo("20 seconds")))
        )
        expect(written).toBe(17)
      }))
  }
)
