// Webhook dispatch is fair across tenants: one platform's hanging receivers hold only its own
// share of the send slots, an endpoint never sees more concurrent requests than its limit, and
// the endpoint cap per platform holds under concurrent registrations. Two gateway instances
// share the outbox throughout, so the limits are shown to hold across instances.
import { randomUUID } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BACKLOG_THRESHOLD } from "../layers/ledger/WebhookOutbox.js"
import { startReceiver, type WebhookReceiver } from "./fakes/WebhookReceiver.js"
import { createEndUser, createPlatform, type Gateway, ok, startGateway } from "./support/Gateway.js"

const PLATFORM_CONCURRENCY = 8
const ENDPOINT_CONCURRENCY = 4
const MAX_ENDPOINTS = 30
/** More endpoints than the old dispatcher's batch of 20: it waited for all of them at once. */
const HANGING_ENDPOINTS = 24

const env = {
  GATEWAY_ALLOW_PRIVATE_URLS: "true",
  // Long enough that no hanging send is cut while a test looks at it.
  GATEWAY_WEBHOOK_TIMEOUT: "5m",
  GATEWAY_WEBHOOK_PLATFORM_CONCURRENCY: String(PLATFORM_CONCURRENCY),
  GATEWAY_WEBHOOK_ENDPOINT_CONCURRENCY: String(ENDPOINT_CONCURRENCY),
  GATEWAY_WEBHOOK_MAX_ENDPOINTS: String(MAX_ENDPOINTS)
}

let gw: Gateway
const receivers: Array<WebhookReceiver> = []

beforeAll(async () => {
  gw = await startGateway({ env })
  await gw.startPeer() // a second dispatcher on the same outbox
})
afterAll(async () => {
  // Receivers first: closing them cuts the held requests, so the instances' shutdown (which
  // waits for sends in flight) is not held up by them.
  for (const r of receivers) await r.close()
  await gw?.close()
})

const receiver = async (options?: Parameters<typeof startReceiver>[0]) => {
  const r = await startReceiver(options)
  receivers.push(r)
  return r
}

/** A platform with one end user and a budget; `topup` makes one budget.topped_up event. */
const tenant = async () => {
  const { platformId, platformKey } = await createPlatform(gw)
  const { endUserId } = await createEndUser(gw, platformId, platformKey, `u-${randomUUID()}`)
  const budget = `/v1/platforms/${platformId}/end-users/${endUserId}/budget`
  ok(await gw.call("POST", budget, { key: platformKey, body: { max_usd: 10 } }), 201)
  const endpoints = `/v1/platforms/${platformId}/webhook-endpoints`
  return {
    platformId,
    platformKey,
    endpoints,
    register: (url: string) =>
      gw.call("POST", endpoints, { key: platformKey, body: { url, event_types: ["budget.topped_up"] } }),
    topup: async () => ok(await gw.call("POST", `${budget}/topup`, { key: platformKey, body: { amount_usd: 1 } })).body
  }
}

describe("fair dispatch", () => {
  it("an endpoint never has more requests in flight than its limit, across instances; every event still arrives once", async () => {
    const t = await tenant()
    const held = await receiver({ hang: true })
    held.secret = ok(await t.register(held.url), 201).body.secret
    const events = 10
    const ids: Array<string> = []
    for (let i = 0; i < events; i++) ids.push(`${(await t.topup()).transaction.id}:budget.topped_up`)

    // All ten are due; the endpoint gets its limit's worth, then one more for each answer.
    await held.waitFor((r) => r.open >= ENDPOINT_CONCURRENCY)
    while (held.events.length < events) {
      await held.waitFor((r) => r.open > 0 || r.events.length === events)
      held.release()
    }
    expect(held.peakOpen).toBe(ENDPOINT_CONCURRENCY)
    expect(held.events.map((e) => e.body.event_id).sort()).toEqual(ids.sort())
    expect(held.requests).toHaveLength(events)
    expect(held.invalid).toEqual([])
  })

  it("a tenant's hanging receivers and its backlog do not delay another tenant's delivery: it arrives while they still hang", async () => {
    const hostile = await tenant()
    const hanging = await receiver({ hang: true })
    for (let i = 0; i < HANGING_ENDPOINTS; i++) ok(await hostile.register(`${hanging.url}/${i}`), 201)
    // One delivery per endpoint per topup, all due now: more due rows than a claim's cheap
    // candidate list, so the claim must look past the backlog to find the other tenant's row.
    const topups = Math.ceil((BACKLOG_THRESHOLD + 1) / HANGING_ENDPOINTS)
    for (let i = 0; i < topups; i++) await hostile.topup()

    // The hostile platform gets its share of the slots, over both instances, and no more.
    await hanging.waitFor((r) => r.open >= PLATFORM_CONCURRENCY)

    const other = await tenant()
    const healthy = await receiver()
    healthy.secret = ok(await other.register(healthy.url), 201).body.secret
    const topup = await other.topup()
    await healthy.waitFor((r) => r.events.length === 1)

    // At the moment the other tenant's event is in, every hanging send is still open, unanswered.
    expect({ open: hanging.open, answered: hanging.requests.length, abandoned: hanging.abandoned }).toEqual({
      open: PLATFORM_CONCURRENCY,
      answered: 0,
      abandoned: 0
    })
    expect(healthy.events[0]!.body.event_id).toBe(`${topup.transaction.id}:budget.topped_up`)
    expect(hanging.peakOpen).toBe(PLATFORM_CONCURRENCY)
    // The hostile platform's other deliveries wait their turn, unclaimed, instead of taking slots.
    const rows = await gw.db.pool.query<{ leased: number; waiting: number }>(
      `SELECT count(*) FILTER (WHERE d.lease_until > now())::int AS leased,
              count(*) FILTER (WHERE d.lease_until IS NULL)::int AS waiting
         FROM webhook_deliveries d JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
        WHERE ep.platform_id = $1 AND d.status = 'pending'`,
      [hostile.platformId]
    )
    expect(rows.rows[0]).toEqual({ leased: PLATFORM_CONCURRENCY, waiting: topups * HANGING_ENDPOINTS - PLATFORM_CONCURRENCY })
  })
})

describe("endpoint cap per platform", () => {
  it(`allows ${MAX_ENDPOINTS} endpoints; one more is 409 conflict naming the limit, and creates nothing`, async () => {
    const t = await tenant()
    for (let i = 0; i < MAX_ENDPOINTS; i++) ok(await t.register(`https://hooks.example.com/${i}`), 201)
    const refused = await t.register("https://hooks.example.com/one-too-many")
    expect(refused.status).toBe(409)
    expect(refused.body.error).toMatchObject({ type: "invalid_request_error", code: "conflict", param: null })
    expect(refused.body.error.message).toContain(`(${MAX_ENDPOINTS})`)
    const list = ok(await gw.call("GET", `${t.endpoints}?limit=100`, { key: t.platformKey })).body
    expect(list.total).toBe(MAX_ENDPOINTS)
    expect(list.data.some((e: any) => e.url.endsWith("one-too-many"))).toBe(false)

    // Deleting one frees its place.
    ok(await gw.call("DELETE", `${t.endpoints}/${list.data[0].id}`, { key: t.platformKey }), 204)
    ok(await t.register("https://hooks.example.com/replacement"), 201)
    expect((await t.register("https://hooks.example.com/again")).status).toBe(409)
  })

  it("concurrent registrations at the limit: exactly the limit pass, on either instance", async () => {
    const t = await tenant()
    const peer = await gw.startPeer()
    const attempts = MAX_ENDPOINTS + 10
    const results = await Promise.all(
      Array.from({ length: attempts }, (_, i) =>
        (i % 2 === 0 ? gw : peer).call("POST", t.endpoints, {
          key: t.platformKey,
          body: { url: `https://hooks.example.com/race/${i}` }
        }))
    )
    const statuses = results.map((r) => r.status)
    expect(statuses.filter((s) => s === 201)).toHaveLength(MAX_ENDPOINTS)
    expect(statuses.filter((s) => s === 409)).toHaveLength(attempts - MAX_ENDPOINTS)
    const counted = await gw.db.pool.query("SELECT count(*)::int AS n FROM webhook_endpoints WHERE platform_id = $1", [t.platformId])
    expect(counted.rows[0].n).toBe(MAX_ENDPOINTS)
  })

  it("other platforms are not counted: a new platform registers freely while another is full", async () => {
    const full = await tenant()
    for (let i = 0; i < MAX_ENDPOINTS; i++) ok(await full.register(`https://hooks.example.com/full/${i}`), 201)
    expect((await full.register("https://hooks.example.com/full/more")).status).toBe(409)
    const fresh = await tenant()
    ok(await fresh.register("https://hooks.example.com/fresh"), 201)
  })
})
