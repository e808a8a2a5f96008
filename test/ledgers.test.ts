// Every ledger is readable over HTTP (budget, platform wallet, display ledger, webhook delivery
// attempts), the sums reconcile with the inference logs, tenants never see each other's rows,
// and a backfill poller gets every row exactly once while writers commit out of order.
import { BigDecimal } from "effect"
import pg from "pg"
import { randomBytes, randomUUID } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startReceiver, type WebhookReceiver } from "./fakes/WebhookReceiver.js"
import { until } from "./support/Polling.js"
import { type ApiResponse, catalogMockEcho, createEndUser, createPlatform, type Gateway, ok, startGateway } from "./support/Gateway.js"

const env = {
  GATEWAY_ALLOW_PRIVATE_URLS: "true",
  GATEWAY_WEBHOOK_RETRY_SCHEDULE: "0s,100ms,100ms",
  GATEWAY_WEBHOOK_TIMEOUT: "1s",
  GATEWAY_ENCRYPTION_KEY: randomBytes(32).toString("base64")
}

let gw: Gateway
const receivers: Array<WebhookReceiver> = []
const clients: Array<pg.Client> = []
beforeAll(async () => {
  gw = await startGateway({ env })
  await catalogMockEcho(gw)
})
afterAll(async () => {
  for (const c of clients) await c.end()
  for (const r of receivers) await r.close()
  await gw?.close()
})

interface Tenant {
  readonly platformId: string
  readonly platformKey: string
  readonly endUserId: string
  readonly endUserKey: string
  readonly budgetId: string
}

const tenant = async (walletUsd = 10): Promise<Tenant> => {
  const { platformId, platformKey } = await createPlatform(gw, { name: "Ledgers", settings: { end_user_wallet: { enabled: true } } })
  ok(await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/mock`, { key: platformKey, body: { api_key: "mock-key" } }))
  ok(await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: walletUsd } }))
  const eu = await createEndUser(gw, platformId, platformKey, `u-${randomUUID()}`)
  const budget = ok(await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: 5 } }), 201)
  return { platformId, platformKey, ...eu, budgetId: budget.body.id }
}

const paths = (t: Tenant) => ({
  budget: `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget/transactions`,
  wallet: `/v1/platforms/${t.platformId}/platform-wallet/transactions`,
  display: `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/wallet/transactions`
})

const chat = (baseCall: Gateway["call"], t: Tenant, content: string) =>
  baseCall("POST", "/v1/chat/completions", {
    key: t.endUserKey,
    body: { model: "mock-echo", messages: [{ role: "user", content }] }
  }).then((res) => ok(res))

/** Exact sum of JSON amounts (each number prints as the decimal the gateway sent). */
const sum = (amounts: ReadonlyArray<number | string>) =>
  amounts.reduce<BigDecimal.BigDecimal>((acc, n) => BigDecimal.sum(acc, BigDecimal.unsafeFromString(String(n))), BigDecimal.make(0n, 0))
const same = (a: BigDecimal.BigDecimal, b: BigDecimal.BigDecimal) => BigDecimal.equals(a, b)

/** Every row of a ledger listing, page by page with `after`. */
const readAll = async (caller: Gateway["call"], key: string, path: string, limit = 2) => {
  const rows: Array<any> = []
  let cursor: string | null = null
  for (;;) {
    const query: string = cursor === null ? `?limit=${limit}` : `?limit=${limit}&after=${cursor}`
    const page: ApiResponse = ok(await caller("GET", `${path}${query}`, { key }))
    expect(page.body.limit).toBe(limit)
    rows.push(...page.body.data)
    if (page.body.data.length === 0) return rows
    expect(page.body.next_cursor).toBe(page.body.data[page.body.data.length - 1].cursor)
    cursor = page.body.next_cursor
  }
}

/** A backfill poller: remembers where it stopped, by cursor or by the last row's created_at. */
const poller = (t: Tenant, path: string, by: "after" | "since") => {
  const seen: Array<string> = []
  let after: string | null = null
  let since: string | null = null
  const poll = async () => {
    for (;;) {
      const query = by === "after"
        ? (after === null ? "?limit=2" : `?limit=2&after=${after}`)
        : (since === null ? "?limit=2" : `?limit=2&since=${encodeURIComponent(since)}`)
      const page = ok(await gw.call("GET", `${path}${query}`, { key: t.platformKey }))
      for (const row of page.body.data) seen.push(row.id)
      if (page.body.data.length === 0) return
      after = page.body.next_cursor
      since = page.body.data[page.body.data.length - 1].created_at
    }
  }
  return { seen, poll }
}

const connect = async () => {
  const client = new pg.Client({ connectionString: gw.db.url })
  await client.connect()
  clients.push(client)
  return client
}

/** A ledger row written straight into each ledger table, in the client's open transaction. */
const insertRows = async (client: pg.Client, t: Tenant, label: string) => {
  await client.query(
    `INSERT INTO budget_transactions (budget_id, platform_id, type, amount_usd, max_usd_before, max_usd_after,
       used_usd_before, used_usd_after, reason, actor_type)
     VALUES ($1, $2, 'debit', 0.01, 5, 5, 0, 0.01, $3, 'system')`,
    [t.budgetId, t.platformId, label]
  )
  await client.query(
    `INSERT INTO platform_wallet_transactions (platform_id, type, amount_usd, balance_before, balance_after, reason)
     VALUES ($1, 'debit', 0.01, 1, 0.99, $2)`,
    [t.platformId, label]
  )
  await client.query(
    `INSERT INTO display_transactions (budget_id, platform_id, type, amount_display, used_display_before,
       used_display_after, reason, actor_type)
     VALUES ($1, $2, 'adjustment', 1, 0, 0, $3, 'system')`,
    [t.budgetId, t.platformId, label]
  )
}

const allIds = async (table: string, t: Tenant) =>
  (await gw.db.pool.query(`SELECT id FROM ${table} WHERE platform_id = $1 ORDER BY id`, [t.platformId])).rows.map((r) => r.id as string)

describe("sums reconcile", () => {
  it("after chat calls and a topup: the wallet's change is the sum of its rows, budget used the sum of debits, both the logs' costs", async () => {
    const t = await tenant(10)
    const walletBefore = ok(await gw.call("GET", `/v1/platforms/${t.platformId}/platform-wallet`, { key: t.platformKey })).body
    for (let i = 0; i < 5; i++) await chat(gw.call, t, `question number ${i} ${"x".repeat(i * 7)}`)
    ok(await gw.call("POST", `/v1/admin/platforms/${t.platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 2, reason: "refill" } }))

    const logs = ok(await gw.call("GET", `/v1/platforms/${t.platformId}/logs?limit=100`, { key: t.platformKey })).body.data as Array<any>
    expect(logs).toHaveLength(5)
    const logCost = sum(logs.map((l) => l.estimated_cost_usd))
    expect(BigDecimal.greaterThan(logCost, BigDecimal.make(0n, 0))).toBe(true)

    const walletRows = await readAll(gw.call, t.platformKey, paths(t).wallet)
    expect(walletRows.map((r) => r.type)).toEqual(["topup", "debit", "debit", "debit", "debit", "debit", "topup"])
    expect(walletRows.at(-1)).toMatchObject({ reason: "refill", amount_usd: 2, log_id: null })
    for (let i = 1; i < walletRows.length; i++) expect(walletRows[i].balance_before_usd).toBe(walletRows[i - 1].balance_after_usd)
    const debits = walletRows.filter((r) => r.type === "debit")
    // Each debit names the log row of the call it paid for, and costs what that log says.
    expect(debits.map((d) => d.log_id).sort()).toEqual(logs.map((l) => l.id).sort())
    for (const d of debits) {
      const log = logs.find((l) => l.id === d.log_id)!
      expect(d.request_id).toBe(log.metadata.request_id)
      expect(same(sum([d.amount_usd]), sum([log.estimated_cost_usd]))).toBe(true)
    }
    const walletAfter = ok(await gw.call("GET", `/v1/platforms/${t.platformId}/platform-wallet`, { key: t.platformKey })).body
    const topups = sum(walletRows.filter((r) => r.type === "topup").map((r) => r.amount_usd))
    const walletDebits = sum(debits.map((r) => r.amount_usd))
    // The wallet's change since the first topup is the sum of the rows after it.
    expect(same(BigDecimal.subtract(sum([walletAfter.balance_usd]), sum([walletBefore.balance_usd])), BigDecimal.subtract(sum([2]), walletDebits))).toBe(true)
    expect(same(sum([walletAfter.balance_usd]), BigDecimal.subtract(topups, walletDebits))).toBe(true)
    expect(same(walletDebits, logCost)).toBe(true)

    const budgetRows = await readAll(gw.call, t.platformKey, paths(t).budget)
    expect(budgetRows.map((r) => r.type)).toEqual(["opening", "debit", "debit", "debit", "debit", "debit"])
    const budget = ok(await gw.call("GET", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget`, { key: t.platformKey })).body
    expect(same(sum([budget.used_usd]), sum(budgetRows.filter((r) => r.type === "debit").map((r) => r.amount_usd)))).toBe(true)
    expect(same(sum([budget.used_usd]), logCost)).toBe(true)
  })
})

describe("display ledger transactions", () => {
  it("lists opening, topup, adjustment and the wallet_disabled row, in order, paged by cursor", async () => {
    const t = await tenant()
    const wallet = `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/wallet`
    const call = (method: string, suffix: string, body?: unknown) => gw.call(method, `${wallet}${suffix}`, { key: t.platformKey, body })
    ok(await call("POST", "", { max_display: 100, reason: "start" }))
    ok(await call("POST", "/topup", { amount_display: 20 }))
    ok(await call("POST", "/adjust", { delta: -30, reason: "used up" }))
    ok(await call("DELETE", ""), 204)
    const rows = await readAll(gw.call, t.platformKey, paths(t).display, 3)
    expect(rows.map((r) => [r.type, r.reason])).toEqual([
      ["opening", "start"],
      ["topup", null],
      ["adjustment", "used up"],
      ["adjustment", "wallet_disabled"]
    ])
    expect(rows[0]).toMatchObject({ budget_id: t.budgetId, amount_display: 100, max_display_before: null, max_display_after: 100, actor_type: "platform_key" })
    expect(rows[2]).toMatchObject({ amount_display: -30, used_display_before: 0, used_display_after: 30 })
    expect(rows[3]).toMatchObject({ amount_display: -120, max_display_before: 120, max_display_after: null, used_display_after: 0 })
  })
})

describe("webhook delivery attempts", () => {
  it("lists each attempt with its outcome, status code and the retry it scheduled", async () => {
    const t = await tenant()
    const r = await startReceiver({ failFirst: 1 })
    receivers.push(r)
    const endpoint = ok(await gw.call("POST", `/v1/platforms/${t.platformId}/webhook-endpoints`, {
      key: t.platformKey,
      body: { url: r.url, event_types: ["budget.topped_up"] }
    }), 201).body
    r.secret = endpoint.secret
    const topup = ok(await gw.call("POST", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget/topup`, { key: t.platformKey, body: { amount_usd: 1 } }))
    await r.waitFor((x) => x.events.length === 1)
    const base = `/v1/platforms/${t.platformId}/webhook-endpoints/${endpoint.id}/deliveries`
    const delivery = (await until(
      () => gw.call("GET", base, { key: t.platformKey }),
      (res) => res.body.data[0]?.status === "delivered"
    )).body.data[0]
    const attempts = ok(await gw.call("GET", `${base}/${delivery.id}/attempts`, { key: t.platformKey })).body
    expect(attempts).toMatchObject({ total: 2, page: 1, limit: 20 })
    const eventId = `${topup.body.transaction.id}:budget.topped_up`
    expect(attempts.data[0]).toMatchObject({ delivery_id: delivery.id, event_id: eventId, event_type: "budget.topped_up", attempt: 1, status: "retry", http_status: 500, error: "HTTP 500" })
    expect(typeof attempts.data[0].next_attempt_at).toBe("string")
    expect(attempts.data[1]).toMatchObject({ event_id: eventId, attempt: 2, status: "delivered", http_status: 200, error: null, next_attempt_at: null })
    expect((await gw.call("GET", `${base}/${randomUUID()}/attempts`, { key: t.platformKey })).status).toBe(404)
  })
})

describe("backfill never skips a row", () => {
  it("transactions that commit out of order: a poller by cursor and one by since each see every row once", async () => {
    const t = await tenant()
    const ledgers = [
      { path: paths(t).budget, table: "budget_transactions" },
      { path: paths(t).wallet, table: "platform_wallet_transactions" },
      { path: paths(t).display, table: "display_transactions" }
    ]
    const pollers = ledgers.flatMap((l) => [{ ...l, ...poller(t, l.path, "after") }, { ...l, ...poller(t, l.path, "since") }])
    for (const p of pollers) await p.poll()

    // A starts first and takes its transaction id, B writes and commits, then A writes and
    // commits: A's rows become readable after B's, with an earlier created_at (A's start) and a
    // later sequence number. Ordered by time or by sequence, a poller that read B's rows would
    // never see A's.
    const a = await connect()
    const b = await connect()
    await a.query("BEGIN")
    await a.query("SELECT pg_current_xact_id()")
    await b.query("BEGIN")
    await insertRows(b, t, "B")
    await b.query("COMMIT")
    // B is committed, but A (older) may still commit rows before it: B's rows are held back.
    for (const p of pollers) await p.poll()
    const labelled = async (table: string, label: string) =>
      (await gw.db.pool.query(`SELECT id FROM ${table} WHERE platform_id = $1 AND reason = $2`, [t.platformId, label])).rows.map((r) => r.id)
    for (const p of pollers) {
      for (const id of await labelled(p.table, "B")) expect(p.seen, `${p.table}: B held back`).not.toContain(id)
    }
    await insertRows(a, t, "A")
    await a.query("COMMIT")
    for (const p of pollers) await p.poll()
    for (const p of pollers) {
      // The premise: A's row is older by time and newer by sequence than B's.
      // Times compared in Postgres, at its microsecond precision (two rows may share a millisecond).
      const { rows: [rowA, rowB] } = await gw.db.pool.query(
        `SELECT id, seq, created_at < (SELECT created_at FROM ${p.table} WHERE platform_id = $1 AND reason = 'B') AS earlier
         FROM ${p.table} WHERE platform_id = $1 AND reason IN ('A', 'B') ORDER BY reason`,
        [t.platformId]
      )
      expect(rowA.earlier === true && Number(rowA.seq) > Number(rowB.seq), p.table).toBe(true)
      expect([...p.seen].sort(), p.table).toEqual(await allIds(p.table, t))
      expect(new Set(p.seen).size, `${p.table}: no row twice`).toBe(p.seen.length)
      expect(p.seen.indexOf(rowA.id), `${p.table}: A's row comes first`).toBeLessThan(p.seen.indexOf(rowB.id))
    }
  })

  it("two instances settling calls while a poller pages by cursor: every row exactly once", async () => {
    const t = await tenant(50)
    const peer = await gw.startPeer(env)
    const walletPoller = poller(t, paths(t).wallet, "after")
    const budgetPoller = poller(t, paths(t).budget, "after")
    const writers = Promise.all([
      ...Array.from({ length: 6 }, (_, i) => chat(i % 2 === 0 ? gw.call : peer.call, t, `concurrent ${i}`)),
      ...Array.from({ length: 3 }, () =>
        gw.call("POST", `/v1/admin/platforms/${t.platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 1 } }))
    ])
    let writing = true
    void writers.finally(() => {
      writing = false
    })
    while (writing) {
      await walletPoller.poll()
      await budgetPoller.poll()
    }
    await writers
    // Both instances' queued settlements are written before the last poll.
    ok(await peer.call("GET", paths(t).wallet, { key: t.platformKey }))
    ok(await gw.call("GET", paths(t).wallet, { key: t.platformKey }))
    await walletPoller.poll()
    await budgetPoller.poll()
    expect([...walletPoller.seen].sort()).toEqual(await allIds("platform_wallet_transactions", t))
    expect(walletPoller.seen).toHaveLength(1 + 6 + 3)
    expect(new Set(walletPoller.seen).size).toBe(walletPoller.seen.length)
    expect([...budgetPoller.seen].sort()).toEqual(await allIds("budget_transactions", t))
    expect(budgetPoller.seen).toHaveLength(1 + 6)
    await peer.close()
  })

  it("an `after` that is not a cursor of this list is a 422 naming `after`", async () => {
    const t = await tenant()
    for (const bad of ["nonsense!", Buffer.from("1:2:3").toString("base64url"), Buffer.from("99999999999999999999999:1").toString("base64url")]) {
      const res = await gw.call("GET", `${paths(t).wallet}?after=${encodeURIComponent(bad)}`, { key: t.platformKey })
      expect(res.status, bad).toBe(422)
      expect(res.body.error.param).toBe("after")
    }
  })
})

describe("tenant isolation", () => {
  it("another platform's key gets 404, an end-user key 403, on every ledger listing", async () => {
    const t = await tenant()
    const other = await tenant()
    const r = await startReceiver()
    receivers.push(r)
    const endpoint = ok(await gw.call("POST", `/v1/platforms/${t.platformId}/webhook-endpoints`, { key: t.platformKey, body: { url: r.url } }), 201).body
    r.secret = endpoint.secret
    ok(await gw.call("POST", `/v1/platforms/${t.platformId}/end-users/${t.endUserId}/budget/topup`, { key: t.platformKey, body: { amount_usd: 1 } }))
    const base = `/v1/platforms/${t.platformId}/webhook-endpoints/${endpoint.id}/deliveries`
    const delivery = (await until(() => gw.call("GET", base, { key: t.platformKey }), (res) => res.body.data.length === 1)).body.data[0]
    const own = [paths(t).budget, paths(t).wallet, paths(t).display, `${base}/${delivery.id}/attempts`]
    for (const path of own) {
      ok(await gw.call("GET", path, { key: t.platformKey }))
      expect((await gw.call("GET", path, { key: other.platformKey })).status, path).toBe(404)
      expect((await gw.call("GET", path, { key: t.endUserKey })).status, path).toBe(403)
    }
    // Through its own platform id, the other tenant still cannot reach these rows.
    const viaOwn = [
      `/v1/platforms/${other.platformId}/end-users/${t.endUserId}/wallet/transactions`,
      `/v1/platforms/${other.platformId}/end-users/${t.endUserId}/budget/transactions`,
      `/v1/platforms/${other.platformId}/webhook-endpoints/${endpoint.id}/deliveries/${delivery.id}/attempts`
    ]
    for (const path of viaOwn) expect((await gw.call("GET", path, { key: other.platformKey })).status, path).toBe(404)
    const otherWallet = ok(await gw.call("GET", paths(other).wallet, { key: other.platformKey })).body.data as Array<any>
    expect(otherWallet.map((row) => row.id).sort()).toEqual(await allIds("platform_wallet_transactions", other))
  })
})

describe("OpenAPI", () => {
  it("documents the ledger listings", async () => {
    const doc = ok(await gw.call("GET", "/openapi.json")).body
    for (
      const path of [
        "/v1/platforms/{platformId}/end-users/{endUserId}/budget/transactions",
        "/v1/platforms/{platformId}/platform-wallet/transactions",
        "/v1/platforms/{platformId}/end-users/{endUserId}/wallet/transactions",
        "/v1/platforms/{platformId}/webhook-endpoints/{endpointId}/deliveries/{deliveryId}/attempts"
      ]
    ) {
      const op = doc.paths[path]?.get
      expect(op, path).toBeDefined()
      expect(op.security).toEqual([{ bearer: [] }])
      expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(["200", "403", "404"]))
    }
    const params = doc.paths["/v1/platforms/{platformId}/platform-wallet/transactions"].get.parameters.map((p: any) => p.name)
    expect(params).toEqual(expect.arrayContaining(["since", "after", "limit"]))
  })
})
