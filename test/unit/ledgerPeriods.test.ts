// BudgetLedger as a unit over a fresh database: period resets across day and month boundaries
// under TestClock (lazy, on the first read after the boundary, with auto_replenish), and the
// edge-triggered low-balance alert, observed through a spy WebhookOutbox layer.
import { expect, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { ConfigProvider, Effect, Layer, TestClock } from "effect"
import { ApiKeys } from "../../layers/tenancy/ApiKeys.js"
import { BudgetLedger } from "../../layers/ledger/BudgetLedger.js"
import { DatabaseLive } from "../../layers/platform/Database.js"
import { EndUsers } from "../../layers/tenancy/EndUsers.js"
import { KeyAuth } from "../../layers/access/KeyAuth.js"
import { Platforms } from "../../layers/tenancy/Platforms.js"
import { type RecordedEvent, WebhookOutbox } from "../../layers/ledger/WebhookOutbox.js"
import { addMonthsClamped, currentPeriodStart } from "../../layers/lib/Periods.js"
import { dec } from "../../layers/lib/Money.js"
import { TestDatabaseUrlLive } from "../support/TestDatabase.js"
import { BigDecimal } from "effect"

/** The budget events the ledger enqueued (WebhookOutbox.test records them). */
const events: Array<RecordedEvent> = []
const SpyOutbox = WebhookOutbox.test(events)
// The live KeyAuth repeats a 1 s flush loop: under TestClock a jump of years would replay it
// millions of times. The ledger only needs `invalidate`, which the test layer makes a no-op.
const KeyAuthStub = KeyAuth.test()


const TestLayer = Layer.mergeAll(Platforms.DefaultWithoutDependencies, EndUsers.DefaultWithoutDependencies).pipe(
  Layer.provideMerge(Layer.mergeAll(ApiKeys.DefaultWithoutDependencies, BudgetLedger.DefaultWithoutDependencies)),
  Layer.provideMerge(Layer.mergeAll(KeyAuthStub, SpyOutbox)),
  Layer.provideMerge(DatabaseLive),
  Layer.provide(TestDatabaseUrlLive),
  Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map())))
)

const actor = { type: "system", keyId: null } as const
const usd = (n: string) => BigDecimal.unsafeFromString(n)
const num = (s: string) => BigDecimal.format(dec(s))

const setup = (externalId: string) =>
  Effect.gen(function*() {
    const platforms = yield* Platforms
    const endUsers = yield* EndUsers
    const { platform } = yield* platforms.create({ name: externalId })
    const { user } = yield* endUsers.create(platform.id, { external_id: externalId }, actor)
    return { platformId: platform.id, endUserId: user.id }
  })

layer(TestLayer, { timeout: "60 seconds" })("BudgetLedger periods", (it) => {
  it.effect("monthly: Jan 31 -> Feb 28 -> Mar 31, lazily, with auto_replenish and an adjustment row", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.UTC(2027, 0, 31, 12))
      const ledger = yield* BudgetLedger
      const sql = yield* PgClient.PgClient
      const { platformId, endUserId } = yield* setup("monthly")
      yield* ledger.create(platformId, endUserId, {
        max_usd: usd("10"),
        period: "monthly",
        auto_replenish: true,
        replenish_amount: usd("7")
      }, actor)
      yield* ledger.debit(platformId, endUserId, { amount_usd: usd("4.5") }, actor).pipe(sql.withTransaction)

      yield* TestClock.setTime(Date.UTC(2027, 1, 28, 11, 59))
      expect(num((yield* ledger.get(platformId, endUserId)).used_usd)).toBe("4.5") // not yet

      yield* TestClock.setTime(Date.UTC(2027, 1, 28, 12))
      const feb = yield* ledger.get(platformId, endUserId)
      expect(feb.period_start.toISOString()).toBe("2027-02-28T12:00:00.000Z")
      expect(num(feb.used_usd)).toBe("0")
      expect(num(feb.max_usd)).toBe("7")

      // Skipping a whole month still lands on the anchor's day: Mar 31, then Apr 30.
      yield* TestClock.setTime(Date.UTC(2027, 3, 5))
      const mar = yield* ledger.get(platformId, endUserId)
      expect(mar.period_start.toISOString()).toBe("2027-03-31T12:00:00.000Z")

      const rows = yield* sql<{ type: string; reason: string; actor_type: string; used_usd_before: string }>`
        SELECT type, reason, actor_type, used_usd_before::text FROM budget_transactions
        WHERE budget_id = ${feb.id} ORDER BY seq`
      expect(rows.map((r) => r.type)).toEqual(["opening", "debit", "adjustment", "adjustment"])
      expect(rows[2]).toMatchObject({ reason: "period_reset", actor_type: "system", used_usd_before: "4.5" })
    }))

  it.effect("daily: resets 24 h after period_start, without replenish keeps max", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.UTC(2027, 5, 1, 8, 30))
      const ledger = yield* BudgetLedger
      const sql = yield* PgClient.PgClient
      const { platformId, endUserId } = yield* setup("daily")
      yield* ledger.create(platformId, endUserId, { max_usd: usd("3"), period: "daily", auto_replenish: false }, actor)
      yield* ledger.debit(platformId, endUserId, { amount_usd: usd("3") }, actor).pipe(sql.withTransaction)
      yield* TestClock.adjust("23 hours")
      expect(num((yield* ledger.get(platformId, endUserId)).used_usd)).toBe("3")
      yield* TestClock.adjust("1 hours")
      const next = yield* ledger.get(platformId, endUserId)
      expect(next.period_start.toISOString()).toBe("2027-06-02T08:30:00.000Z")
      expect(num(next.used_usd)).toBe("0")
      expect(num(next.max_usd)).toBe("3")
      // A write after the next boundary resets first, then applies.
      yield* TestClock.adjust("25 hours")
      const change = yield* ledger.debit(platformId, endUserId, { amount_usd: usd("1") }, actor).pipe(sql.withTransaction)
      expect(change.budget.period_start.toISOString()).toBe("2027-06-03T08:30:00.000Z")
      expect(num(change.budget.used_usd)).toBe("1")
    }))

  it.effect("low balance fires once per crossing, again only after a topup", () =>
    Effect.gen(function*() {
      const ledger = yield* BudgetLedger
      const sql = yield* PgClient.PgClient
      const { platformId, endUserId } = yield* setup("low")
      const budget = yield* ledger.create(platformId, endUserId, {
        max_usd: usd("10"),
        period: "one_time",
        auto_replenish: false,
        low_balance_threshold: usd("3")
      }, actor)
      const lowEvents = Effect.sync(() => events.filter((e) => e.data.budget_id === budget.id && e.type === "budget.low_balance").length)
      const debit = (amount: string) => ledger.debit(platformId, endUserId, { amount_usd: usd(amount) }, actor).pipe(sql.withTransaction)
      const topup = (amount: string) => ledger.topup(platformId, endUserId, { amount_usd: usd(amount) }, actor).pipe(sql.withTransaction)

      yield* debit("6") // remaining 4
      expect(yield* lowEvents).toBe(0)
      yield* debit("1") // remaining 3: crosses (<= threshold)
      expect(yield* lowEvents).toBe(1)
      yield* debit("1")
      yield* debit("5") // remaining -3: still below, disarmed
      expect(yield* lowEvents).toBe(1)
      yield* topup("1") // remaining -2: re-armed but not above the threshold
      yield* debit("0.5")
      expect(yield* lowEvents).toBe(1)
      yield* topup("10") // remaining 7.5
      yield* debit("4.5") // remaining 3: crosses again
      expect(yield* lowEvents).toBe(2)
      yield* debit("1")
      expect(yield* lowEvents).toBe(2)
      expect(events.filter((e) => e.data.budget_id === budget.id && e.type === "budget.topped_up")).toHaveLength(2)
      expect(events.filter((e) => e.data.budget_id === budget.id && e.type === "budget.debited")).toHaveLength(7)
    }))
})

layer(Layer.empty)("period arithmetic", (it) => {
  it("clamps month ends and counts from the anchor", () => {
    const anchor = new Date(Date.UTC(2024, 0, 31))
    expect(addMonthsClamped(anchor, 1).toISOString()).toBe("2024-02-29T00:00:00.000Z")
    expect(addMonthsClamped(anchor, 2).toISOString()).toBe("2024-03-31T00:00:00.000Z")
    expect(addMonthsClamped(anchor, 13).toISOString()).toBe("2025-02-28T00:00:00.000Z")
    expect(currentPeriodStart("monthly", anchor, new Date(Date.UTC(2024, 2, 30))).toISOString()).toBe("2024-02-29T00:00:00.000Z")
    expect(currentPeriodStart("one_time", anchor, new Date(Date.UTC(2030, 0, 1)))).toBe(anchor)
  })
})
