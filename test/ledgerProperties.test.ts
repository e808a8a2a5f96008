// Property test: hundreds of parallel debits and topups of random exact amounts leave
// used_usd and max_usd equal to the exact sums, and the ledger rows chain without gaps.
import fc from "fast-check"
import { afterAll, beforeAll, expect, it } from "vitest"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
let p: { platformId: string; platformKey: string }
beforeAll(async () => {
  gw = await startGateway({ env: { DATABASE_POOL_SIZE: "16" } })
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
