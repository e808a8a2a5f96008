// Property test: hundreds of parallel debits and topups of random exact amounts leave
// used_usd and max_usd equal to the exact sums, and the ledger rows chain without gaps. Then the
// same for parallel inference calls, whose settlements are written in groups (Settlements).
import fc from "fast-check"
import { afterAll, beforeAll, expect, it } from "vitest"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
let p: { platformId: string; platformKey: string }
beforeAll(async () => {
  gw = await startGateway({ env: { DATABASE_POOL_SIZE: "16", GATEWAY_ALLOW_PRIVATE_URLS: "true" } })
  p = await createPlatform(gw)
})
afterAll(async () => {
  await gw?.close()
})

/** Amounts in thousandths of a cent, so expected sums are exact integers. */
const op = fc.record({
  kind: fc.constantFrom("debit" as const, "topup" as const),
  micros: fc.integer({ min: 1, max: 5_000_000 })
})
const toUsd = (micros: number) => micros / 100_000 // e.g. 123457 -> 1.23457 (exact in JSON)
const fromUsdText = (text: string) => BigInt(Math.round(Number(text) * 100_000))

let run = 0
it("parallel debits and topups sum exactly and chain", async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(op, { minLength: 100, maxLength: 250 }), async (ops) => {
      const eu = await createEndUser(gw, p.platformId, p.platformKey, `prop-${run++}`)
      const base = `/v1/platforms/${p.platformId}/end-users/${eu.endUserId}/budget`
      const opened = await gw.call("POST", base, { key: p.platformKey, body: { max_usd: 1 } })
      expect(opened.status).toBe(201)
      const results = await Promise.all(ops.map((o) =>
        gw.call("POST", `${base}/${o.kind}`, { key: p.platformKey, body: { amount_usd: toUsd(o.micros) } })
      ))
      expect(results.every((r) => r.status === 200)).toBe(true)

      const expectedUsed = ops.filter((o) => o.kind === "debit").reduce((s, o) => s + BigInt(o.micros), 0n)
      const expectedMax = 100_000n + ops.filter((o) => o.kind === "topup").reduce((s, o) => s + BigInt(o.micros), 0n)
      const { rows: [budget] } = await gw.db.pool.query(
        "SELECT id, max_usd::text AS max, used_usd::text AS used FROM budgets WHERE end_user_id = $1",
        [eu.endUserId]
      )
      // numeric text -> exact integer micro-units, compared as BigInt (no float sums).
      const [maxInt, maxFrac = ""] = String(budget.max).split(".")
      const [usedInt, usedFrac = ""] = String(budget.used).split(".")
      expect(BigInt(maxInt! + maxFrac.padEnd(5, "0"))).toBe(expectedMax)
      expect(BigInt(usedInt! + usedFrac.padEnd(5, "0"))).toBe(expectedUsed)

      const { rows } = await gw.db.pool.query(
        `SELECT type, amount_usd::text, max_usd_before::text, max_usd_after::text, used_usd_before::text, used_usd_after::text
         FROM budget_transactions WHERE budget_id = $1 ORDER BY seq`,
        [budget.id]
      )
      expect(rows).toHaveLength(ops.length + 1)
      for (let i = 1; i < rows.length; i++) {
        const prev = rows[i - 1]!
        const row = rows[i]!
        expect(fromUsdText(row.max_usd_before)).toBe(fromUsdText(prev.max_usd_after))
        expect(fromUsdText(row.used_usd_before)).toBe(fromUsdText(prev.used_usd_after))
        const delta = row.type === "debit"
          ? fromUsdText(row.used_usd_after) - fromUsdText(row.used_usd_before)
          : fromUsdText(row.max_usd_after) - fromUsdText(row.max_usd_before)
        expect(delta).toBe(fromUsdText(row.amount_usd))
      }
    }),
    { numRuns: 3 }
  )
}, 120_000)

/** numeric text (up to 9 decimals) -> exact integer nano-units. */
const nanos = (text: string) => {
  const [int, frac = ""] = text.split(".")
  return BigInt(int! + frac.padEnd(9, "0"))
}

it("parallel inference calls, settled in groups: exact sums, budget and wallet ledgers chain, one low-balance alert", async () => {
  await gw.call("POST", "/v1/admin/providers", { key: gw.adminKey, body: { slug: "mock", kind: "mock", base_url: "http://mock.invalid" } })
  await gw.call("POST", "/v1/admin/models", {
    key: gw.adminKey,
    body: { slug: "mock-echo", providers: [{ provider: "mock", provider_model_id: "echo-1", input_usd_per_mtok: 1, output_usd_per_mtok: 2 }] }
  })
  const t = await createPlatform(gw, { name: "Grouped" })
  await gw.call("PUT", `/v1/platforms/${t.platformId}/provider-keys/mock`, { key: t.platformKey, body: { api_key: "k" } })
  await gw.call("POST", `/v1/admin/platforms/${t.platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } })
  // An endpoint for the low-balance event, so its outbox row is written (delivery may fail).
  const endpoint = await gw.call("POST", `/v1/platforms/${t.platformId}/webhook-endpoints`, {
    key: t.platformKey,
    body: { url: "http://127.0.0.1:9/hook", event_types: ["budget.low_balance"] }
  })
  expect(endpoint.status).toBe(201)
  const eu = await createEndUser(gw, t.platformId, t.platformKey, "grouped")
  const base = `/v1/platforms/${t.platformId}/end-users/${eu.endUserId}/budget`
  expect((await gw.call("POST", base, { key: t.platformKey, body: { max_usd: 0.001, low_balance_threshold: 0.0005 } })).status).toBe(201)

  // 80 calls of 0.000009 USD each ("hello there": 3 + 3 tokens): remaining 0.001 -> 0.00028,
  // crossing the 0.0005 threshold once, somewhere inside a group.
  const calls = await Promise.all(Array.from({ length: 80 }, () =>
    gw.call("POST", "/v1/chat/completions", { key: eu.endUserKey, body: { model: "mock-echo", messages: [{ role: "user", content: "hello there" }] } })
  ))
  expect(calls.map((c) => c.status).every((s) => s === 200)).toBe(true)

  const { rows: [budget] } = await gw.db.pool.query("SELECT id, used_usd::text AS used FROM budgets WHERE end_user_id = $1", [eu.endUserId])
  expect(nanos(budget.used)).toBe(80n * 9_000n)
  const { rows: debits } = await gw.db.pool.query(
    `SELECT amount_usd::text AS amount, used_usd_before::text AS before, used_usd_after::text AS after
     FROM budget_transactions WHERE budget_id = $1 AND type = 'debit' ORDER BY created_at, seq`,
    [budget.id]
  )
  expect(debits).toHaveLength(80)
  let used = 0n
  for (const row of debits) {
    expect(nanos(row.before)).toBe(used)
    expect(nanos(row.after) - nanos(row.before)).toBe(nanos(row.amount))
    used = nanos(row.after)
  }
  const { rows: wallet } = await gw.db.pool.query(
    `SELECT type, amount_usd::text AS amount, balance_before::text AS before, balance_after::text AS after
     FROM platform_wallet_transactions WHERE platform_id = $1 ORDER BY seq`,
    [t.platformId]
  )
  expect(wallet.filter((w) => w.type === "debit")).toHaveLength(80)
  for (let i = 1; i < wallet.length; i++) {
    expect(nanos(wallet[i]!.before)).toBe(nanos(wallet[i - 1]!.after))
    const delta = nanos(wallet[i]!.after) - nanos(wallet[i]!.before)
    expect(wallet[i]!.type === "debit" ? -delta : delta).toBe(nanos(wallet[i]!.amount))
  }
  expect(nanos(wallet.at(-1)!.after)).toBe(10_000_000_000n - 80n * 9_000n)
  const { rows: [alerts] } = await gw.db.pool.query(
    "SELECT count(*)::int AS n FROM webhook_events WHERE platform_id = $1 AND event_type = 'budget.low_balance'",
    [t.platformId]
  )
  expect(alerts.n).toBe(1)
  const { rows: [logs] } = await gw.db.pool.query("SELECT count(*)::int AS n FROM inference_logs WHERE end_user_id = $1", [eu.endUserId])
  expect(logs.n).toBe(80)
}, 60_000)
