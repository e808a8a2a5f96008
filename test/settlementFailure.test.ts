// A settlement that fails for good (here a trigger refuses the platform's budget debits) is never
// dropped silently: after its retries the call is logged with billing_status `failed` and the
// database's error code, nothing is debited, and the operator lists it.
import { afterAll, beforeAll, expect, it } from "vitest"
import { until } from "./support/Polling.js"
import { catalogMockEcho, createEndUser, createPlatform, type Gateway, ok, startGateway } from "./support/Gateway.js"

let gw: Gateway
beforeAll(async () => {
  gw = await startGateway()
  await catalogMockEcho(gw)
})
afterAll(async () => {
  await gw?.close()
})

it("a settlement refused by the database is logged as failed, not billed, and listed for the operator", async () => {
  const { platformId, platformKey } = await createPlatform(gw)
  ok(await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/mock`, { key: platformKey, body: { api_key: "mock-key" } }))
  ok(await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 5 } }))
  const eu = await createEndUser(gw, platformId, platformKey, "refused")
  ok(await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: 5 } }), 201)
  // Every debit of this platform's budgets fails from now on, whatever the path writes it.
  await gw.db.pool.query(`CREATE FUNCTION refuse_debits() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.platform_id = '${platformId}' AND NEW.type = 'debit' THEN RAISE EXCEPTION 'refused by test'; END IF;
      RETURN NEW;
    END $$`)
  await gw.db.pool.query("CREATE TRIGGER refuse_debits BEFORE INSERT ON budget_transactions FOR EACH ROW EXECUTE FUNCTION refuse_debits()")
  try {
    const answer = ok(await gw.call("POST", "/v1/chat/completions", {
      key: eu.endUserKey,
      body: { model: "mock-echo", messages: [{ role: "user", content: "bill me if you can" }] }
    }))
    const logsPath = `/v1/platforms/${platformId}/logs?billing_status=failed`
    const failed = await until(() => gw.call("GET", logsPath, { key: platformKey }), (res) => res.body.data?.length === 1, 20_000)
    const row = failed.body.data[0]
    expect(row).toMatchObject({ billing_status: "failed", status: "success", request_type: "chat.completion" })
    expect(row.metadata.request_id).toBe(answer.body.id)
    expect(row.error_message).toBe("not billed: settlement failed (database error P0001)")
    expect(Number(row.estimated_cost_usd)).toBeGreaterThan(0)

    // Nothing moved: no debit, the wallet as topped up, the budget unused.
    const debits = await gw.db.pool.query("SELECT count(*)::int AS n FROM budget_transactions WHERE platform_id = $1 AND type = 'debit'", [platformId])
    expect(debits.rows[0].n).toBe(0)
    expect(ok(await gw.call("GET", `/v1/platforms/${platformId}/platform-wallet`, { key: platformKey })).body.balance_usd).toBe(5)
    const budget = ok(await gw.call("GET", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey })).body
    expect(budget.used_usd).toBe(0)

    // The operator sees it across platforms; a platform key may not.
    const listed = ok(await gw.call("GET", "/v1/admin/settlement-failures", { key: gw.adminKey })).body
    expect(listed.data.map((r: { id: string }) => r.id)).toContain(row.id)
    expect((await gw.call("GET", "/v1/admin/settlement-failures", { key: platformKey })).status).toBe(403)
    // Other billing statuses are still listed by their own filter.
    expect(ok(await gw.call("GET", `/v1/platforms/${platformId}/logs?billing_status=billed`, { key: platformKey })).body.data).toHaveLength(0)
  } finally {
    await gw.db.pool.query("DROP TRIGGER refuse_debits ON budget_transactions")
    await gw.db.pool.query("DROP FUNCTION refuse_debits()")
  }
}, 60_000)
