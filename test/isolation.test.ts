// Tenant isolation matrix generated from /openapi.json: every operation, called with keys that
// must not reach platform B's data (A's platform key, A's end-user key, an expired key, revoked
// keys, a deleted end user's key), and A's own routes pointed at B's resource ids. Nothing of B
// may show in any answer, and B's rows are byte-for-byte the same afterwards. A control run on a
// third platform sends the very same requests with the owner's keys, so the refusals above are
// known to come from isolation and not from malformed requests.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type ApiResponse, createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

interface Tenant {
  readonly name: string
  readonly platformId: string
  readonly platformKey: string
  readonly platformKeyId: string
  readonly extraKeyId: string
  readonly extraKey: string
  readonly endUserId: string
  readonly endUserKey: string
  readonly endUserKeyId: string
  readonly externalId: string
  readonly endpointId: string
  readonly deliveryId: string
  readonly webhookSecret: string
  readonly responseId: string
}

interface Operation {
  readonly method: string
  readonly path: string
  readonly op: any
}

let gw: Gateway
let spec: any
let operations: Array<Operation>
let capabilitySlug: string
let capabilityUid: string
let a: Tenant
let b: Tenant
let expiredKey: string
let revokedPlatformKey: string
let revokedEndUserKey: string
let deletedUserKey: string

const ok = (res: ApiResponse, what: string, status = [200, 201]) => {
  if (!status.includes(res.status)) throw new Error(`${what}: ${res.status} ${JSON.stringify(res.body)}`)
  return res.body
}

/** A platform with everything the matrix points at: user, budget, keys, webhook endpoint, wallet, stored response. */
const tenant = async (name: string): Promise<Tenant> => {
  const p = await createPlatform(gw, { name })
  const pid = p.platformId
  const call = (method: string, path: string, body?: unknown) =>
    gw.call(method, `/v1/platforms/${pid}${path}`, { key: p.platformKey, ...(body === undefined ? {} : { body }) })
  ok(await call("PUT", "/provider-keys/mock", { api_key: `mock-key-${name}` }), "provider key")
  ok(await gw.call("POST", `/v1/admin/platforms/${pid}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } }), "wallet topup")
  const externalId = `${name}-user-${crypto.randomUUID()}`
  const eu = await createEndUser(gw, pid, p.platformKey, externalId)
  ok(await call("POST", `/end-users/${eu.endUserId}/budget`, { max_usd: 5 }), "budget")
  ok(await call("POST", `/end-users/${eu.endUserId}/wallet`, { max_display: 10 }), "display wallet")
  const response = ok(
    await gw.call("POST", "/v1/responses", { key: eu.endUserKey, body: { model: "mock-echo", input: `hello from ${name}` } }),
    "stored response"
  )
  const extra = ok(await call("POST", "/api-keys", { name: "extra" }), "extra key")
  // Only budget.debited, and nothing debits after this: no deliveries move under the snapshot.
  const endpoint = ok(
    await call("POST", "/webhook-endpoints", { url: "http://127.0.0.1:9/x", event_types: ["budget.debited"] }),
    "webhook endpoint"
  )
  // A delivery that already gave up (the dispatcher leaves it alone), with its one attempt.
  const { rows: [delivery] } = await gw.db.pool.query(
    `WITH e AS (INSERT INTO webhook_events (event_id, platform_id, event_type, payload)
        VALUES ($1, $2, 'budget.debited', '{}'::jsonb) RETURNING id),
      d AS (INSERT INTO webhook_deliveries (event_id, endpoint_id, status, attempt, next_attempt_at, last_error)
        SELECT e.id, $3, 'failed', 1, NULL, 'HTTP 500' FROM e RETURNING id)
    INSERT INTO webhook_delivery_attempts (delivery_id, attempt, http_status, error, status)
      SELECT d.id, 1, 500, 'HTTP 500', 'failed' FROM d RETURNING delivery_id`,
    [`${crypto.randomUUID()}:budget.debited`, pid, endpoint.id]
  )
  return {
    name,
    platformId: pid,
    platformKey: p.platformKey,
    platformKeyId: p.body.api_key.id,
    extraKeyId: extra.id,
    extraKey: extra.raw_key,
    endUserId: eu.endUserId,
    endUserKey: eu.endUserKey,
    endUserKeyId: eu.body.api_key.id,
    externalId,
    endpointId: endpoint.id,
    deliveryId: delivery.delivery_id,
    webhookSecret: endpoint.secret,
    responseId: response.id
  }
}

/** Everything of a tenant that must never show up in another tenant's answers. */
const secretsOf = (t: Tenant): Array<string> =>
  [
    t.platformId, t.platformKey, t.platformKeyId, t.extraKeyId, t.extraKey, t.endUserId, t.endUserKey,
    t.endUserKeyId, t.externalId, t.endpointId, t.deliveryId, t.webhookSecret, t.responseId
  ].filter((s) => typeof s === "string" && s.length > 0)

/** Path parameters: an unknown one fails the test, so a new endpoint cannot slip through unmapped. */
const pathParam = (name: string, t: Tenant): string => {
  switch (name) {
    case "platformId":
      return t.platformId
    case "endUserId":
      return t.endUserId
    case "keyId":
      return t.extraKeyId
    case "endpointId":
      return t.endpointId
    case "deliveryId":
      return t.deliveryId
    case "provider":
      return "mock"
    case "slug":
      return capabilitySlug
    case "responseId":
      return t.responseId
    case "model":
      return "mock-echo"
    default:
      throw new Error(`isolation matrix: no mapping for path parameter {${name}}; add it to pathParam`)
  }
}

const fillPath = (path: string, resolve: (name: string) => string) =>
  path.replace(/\{([^}]+)\}/g, (_, name: string) => encodeURIComponent(resolve(name)))

/** Query strings that try to reach the target tenant's rows through filters. */
const queryFor = (op: Operation, t: Tenant): string => {
  const names = new Set((op.op.parameters ?? []).filter((p: any) => p.in === "query").map((p: any) => p.name as string))
  const q = new URLSearchParams()
  if (names.has("end_user_id")) q.set("end_user_id", t.endUserId)
  if (names.has("external_id")) q.set("external_id", t.externalId)
  const s = q.toString()
  return s === "" ? "" : `?${s}`
}

/** Request bodies that are valid for the target tenant (the control run proves it). */
const bodyTable: Record<string, (t: Tenant) => unknown> = {
  "POST /v1/chat/completions": () => ({ model: "mock-echo", messages: [{ role: "user", content: "hi" }] }),
  "POST /v1/responses": () => ({ model: "mock-echo", input: "hi" }),
  "POST /v1/embeddings": () => ({ model: "mock-embed", input: "hi" }),
  "POST /v1/admin/platforms": () => ({ name: "iso-created" }),
  "POST /v1/admin/providers": () => ({ slug: "iso-provider", kind: "mock", base_url: "http://mock.invalid" }),
  "POST /v1/admin/models": () => ({ slug: "iso-model", providers: [{ provider: "mock", provider_model_id: "iso-1" }] }),
  "POST /v1/admin/platforms/{platformId}/platform-wallet/topup": () => ({ amount_usd: 1, reason: "iso" }),
  "PATCH /v1/platforms/{platformId}": () => ({ name: "iso-renamed" }),
  "PUT /v1/platforms/{platformId}/provider-keys/{provider}": () => ({ api_key: "iso-stolen-key" }),
  "POST /v1/platforms/{platformId}/api-keys": (t) => ({ name: "iso", end_user_id: t.endUserId }),
  "PATCH /v1/platforms/{platformId}/api-keys/{keyId}": () => ({ name: "iso-renamed" }),
  "POST /v1/platforms/{platformId}/end-users": () => ({ external_id: "iso-intruder" }),
  "PATCH /v1/platforms/{platformId}/end-users/{endUserId}": () => ({ display_name: "iso-renamed", metadata: { iso: true } }),
  "PUT /v1/platforms/{platformId}/end-users/{endUserId}/rate-limits": () => ({ rpm_limit: 1 }),
  "POST /v1/platforms/{platformId}/end-users/{endUserId}/budget": () => ({ max_usd: 1 }),
  "PATCH /v1/platforms/{platformId}/end-users/{endUserId}/budget": () => ({ max_usd: 1, reason: "iso" }),
  "POST /v1/platforms/{platformId}/end-users/{endUserId}/budget/topup": () => ({ amount_usd: 1, reason: "iso" }),
  "POST /v1/platforms/{platformId}/end-users/{endUserId}/budget/debit": () => ({ amount_usd: 0.01, reason: "iso" }),
  "POST /v1/platforms/{platformId}/end-users/{endUserId}/wallet": () => ({ max_display: 1 }),
  "POST /v1/platforms/{platformId}/end-users/{endUserId}/wallet/topup": () => ({ amount_display: 1, reason: "iso" }),
  "POST /v1/platforms/{platformId}/end-users/{endUserId}/wallet/adjust": () => ({ delta: -1, reason: "iso" }),
  "POST /v1/platforms/{platformId}/webhook-endpoints": () => ({ url: "http://127.0.0.1:9/iso" }),
  "POST /v1/platforms/{platformId}/mcp/apps": () => ({
    app_slug: "github",
    client_id: "iso-client",
    client_secret: "iso-secret",
    base_url: "http://127.0.0.1:9"
  }),
  "POST /v1/capabilities/search": () => ({ query: "search" }),
  "POST /v1/capabilities/run": () => ({ capability: capabilityUid }),
  "POST /v1/admin/capabilities/providers": () => ({
    capability: { slug: "iso-capability", name: "Iso" },
    providers: [{ slug: "iso-provider", name: "Iso", url: "http://127.0.0.1:9/iso", min_price_usd: 0.01 }]
  })
}

/** Fallback for operations not in the table: the schema's required properties with sample values. */
const sample = (schema: any, depth = 0): unknown => {
  if (schema === undefined || depth > 8) return "x"
  if (schema.$ref !== undefined) return sample(spec.components.schemas[String(schema.$ref).split("/").pop()!], depth + 1)
  if (schema.enum !== undefined) return schema.enum[0]
  if (schema.anyOf !== undefined) return sample(schema.anyOf.find((s: any) => s.type !== "null") ?? schema.anyOf[0], depth + 1)
  if (schema.allOf !== undefined) return sample(schema.allOf[0], depth + 1)
  switch (schema.type) {
    case "object":
      return Object.fromEntries((schema.required ?? []).map((k: string) => [k, sample(schema.properties?.[k], depth + 1)]))
    case "array":
      return Array.from({ length: schema.minItems ?? 0 }, () => sample(schema.items, depth + 1))
    case "number":
    case "integer":
      return 1
    case "boolean":
      return true
    default:
      return "x"
  }
}

const bodyFor = (op: Operation, t: Tenant): unknown => {
  const schema = op.op.requestBody?.content?.["application/json"]?.schema
  if (schema === undefined) return undefined
  const make = bodyTable[`${op.method} ${op.path}`]
  return make !== undefined ? make(t) : sample(schema)
}

const send = (op: Operation, key: string, pathTenant: Tenant, resourceTenant: Tenant = pathTenant) => {
  const url = fillPath(op.path, (name) => pathParam(name, name === "platformId" ? pathTenant : resourceTenant)) +
    queryFor(op, resourceTenant)
  const body = bodyFor(op, resourceTenant)
  return gw.call(op.method, url, { key, ...(body === undefined ? {} : { body }) })
}

/** Capabilities on, the slug in use denylisted: runs go through policy and stop before any outbound call. */
const enableCapabilities = async (t: Tenant) =>
  ok(
    await gw.call("PATCH", `/v1/platforms/${t.platformId}`, {
      key: t.platformKey,
      body: { settings: { capabilities: { enabled: true, denylist: [capabilitySlug] } } }
    }),
    "enable capabilities"
  )

const label = (op: Operation, kind: string) => `${kind}: ${op.method} ${op.path}`

/** No secret or id of B anywhere in the answer (headers included). */
const expectNothingOf = (t: Tenant, res: ApiResponse, what: string) => {
  const text = JSON.stringify(res.body) + JSON.stringify([...res.headers.entries()])
  for (const s of secretsOf(t)) expect(text.includes(s), `${what} leaked ${s} in ${text.slice(0, 300)}`).toBe(false)
}

const isPlatformRoute = (op: Operation) => op.path.startsWith("/v1/platforms/{platformId}")
// GET /v1/platform (the key's own platform) is a shared route that only platform keys may call.
const isAdminRoute = (op: Operation) => op.path.startsWith("/v1/admin/")
/** Routes every authenticated key may call; they must answer about the caller only. */
const isSharedRoute = (op: Operation) => !isPlatformRoute(op) && !isAdminRoute(op)

/** B's rows in every table that names a platform or one of B's end users (volatile columns out). */
const snapshot = async (t: Tenant) => {
  const { rows: tables } = await gw.db.pool.query<{ table_name: string; column_name: string }>(
    `SELECT table_name, column_name FROM information_schema.columns
      WHERE table_schema = current_schema() AND column_name IN ('platform_id', 'end_user_id')
      ORDER BY table_name, column_name`
  )
  const byTable = new Map<string, Set<string>>()
  for (const r of tables) byTable.set(r.table_name, (byTable.get(r.table_name) ?? new Set()).add(r.column_name))
  const out: Record<string, Array<string>> = {}
  for (const [table, columns] of byTable) {
    const [column, id] = columns.has("platform_id") ? ["platform_id", t.platformId] : ["end_user_id", t.endUserId]
    const { rows } = await gw.db.pool.query(
      `SELECT to_jsonb(x) - 'last_used_at' AS row FROM "${table}" x WHERE ${column} = $1`,
      [id]
    )
    out[table] = rows.map((r) => JSON.stringify(r.row)).sort()
  }
  const platform = await gw.db.pool.query("SELECT to_jsonb(p) AS row FROM platforms p WHERE id = $1", [t.platformId])
  out.platforms = platform.rows.map((r) => JSON.stringify(r.row))
  return out
}

beforeAll(async () => {
  gw = await startGateway({ env: { GATEWAY_ALLOW_PRIVATE_URLS: "true" } })
  const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body })
  ok(await admin("/v1/admin/providers", { slug: "mock", kind: "mock", base_url: "http://mock.invalid" }), "provider")
  ok(
    await admin("/v1/admin/models", {
      slug: "mock-echo",
      providers: [{ provider: "mock", provider_model_id: "echo-1", input_usd_per_mtok: 1, output_usd_per_mtok: 2 }]
    }),
    "model"
  )
  ok(
    await admin("/v1/admin/models", {
      slug: "mock-embed",
      serves: ["embeddings"],
      providers: [{ provider: "mock", provider_model_id: "embed-1", input_usd_per_mtok: 1 }]
    }),
    "embeddings model"
  )
  a = await tenant("a")
  // The expired key first, so its 1.5 s run out while the rest is set up.
  const expiresAt = Date.now() + 1500
  expiredKey = ok(
    await gw.call("POST", `/v1/platforms/${a.platformId}/api-keys`, {
      key: a.platformKey,
      body: { name: "expiring", expires_at: new Date(expiresAt).toISOString() }
    }),
    "expiring key"
  ).raw_key
  expect((await gw.call("GET", `/v1/platforms/${a.platformId}`, { key: expiredKey })).status).toBe(200) // cached while valid
  b = await tenant("b")

  const revoked = ok(await gw.call("POST", `/v1/platforms/${a.platformId}/api-keys`, { key: a.platformKey, body: { name: "revoked" } }), "key")
  ok(
    await gw.call("PATCH", `/v1/platforms/${a.platformId}/api-keys/${revoked.id}`, { key: a.platformKey, body: { is_active: false } }),
    "revoke"
  )
  revokedPlatformKey = revoked.raw_key
  const revokedEu = ok(
    await gw.call("POST", `/v1/platforms/${a.platformId}/api-keys`, { key: a.platformKey, body: { end_user_id: a.endUserId } }),
    "end-user key"
  )
  ok(
    await gw.call("PATCH", `/v1/platforms/${a.platformId}/api-keys/${revokedEu.id}?type=end_user`, {
      key: a.platformKey,
      body: { is_active: false }
    }),
    "revoke end-user key"
  )
  revokedEndUserKey = revokedEu.raw_key
  const doomed = await createEndUser(gw, a.platformId, a.platformKey, "doomed")
  ok(await gw.call("DELETE", `/v1/platforms/${a.platformId}/end-users/${doomed.endUserId}`, { key: a.platformKey }), "delete user", [204])
  deletedUserKey = doomed.endUserKey

  const caps = ok(await gw.call("GET", "/v1/capabilities", { key: b.platformKey }), "capabilities")
  capabilitySlug = caps.capabilities[0]?.slug
  if (typeof capabilitySlug !== "string") throw new Error("the capability catalog is empty: no slug for {slug}")
  const detail = ok(await gw.call("GET", `/v1/capabilities/${capabilitySlug}`, { key: b.platformKey }), "capability")
  capabilityUid = detail.providers[0]?.uid
  if (typeof capabilityUid !== "string") throw new Error(`capability ${capabilitySlug} has no provider uid`)
  await enableCapabilities(a)

  spec = ok(await gw.call("GET", "/openapi.json"), "openapi")
  operations = Object.entries(spec.paths as Record<string, Record<string, any>>).flatMap(([path, ops]) =>
    Object.entries(ops)
      .filter(([method]) => ["get", "post", "put", "patch", "delete"].includes(method))
      .map(([method, op]) => ({ method: method.toUpperCase(), path, op }))
  )
  await new Promise((r) => setTimeout(r, Math.max(0, expiresAt - Date.now()) + 200))
})
afterAll(async () => {
  await gw?.close()
})

describe("isolation matrix over every operation in /openapi.json", () => {
  let before: Awaited<ReturnType<typeof snapshot>>
  const checked = new Map<string, number>()
  const count = (kind: string) => checked.set(kind, (checked.get(kind) ?? 0) + 1)

  it("covers the whole API, every operation authenticated, every path parameter mapped", () => {
    expect(operations.length).toBeGreaterThanOrEqual(50)
    for (const op of operations) {
      expect(op.op.security, `${op.method} ${op.path}`).toEqual([{ bearer: [] }])
      for (const name of op.path.match(/\{([^}]+)\}/g) ?? []) pathParam(name.slice(1, -1), b) // throws when unmapped
    }
  })

  it("takes B's snapshot", async () => {
    before = await snapshot(b)
    expect(before.end_users!.length).toBe(1)
    expect(before.api_keys!.length).toBe(3)
    expect(before.budgets!.length).toBeGreaterThanOrEqual(1)
    expect(before.budget_transactions!.length).toBeGreaterThanOrEqual(1)
    expect(before.webhook_endpoints!.length).toBe(1)
    expect(before.responses!.length).toBe(1)
  })

  it("dead keys (expired, revoked, deleted user) get 401 everywhere", async () => {
    const dead: Array<[string, string, string]> = [
      ["expired platform key", expiredKey, "api_key_expired"],
      ["revoked platform key", revokedPlatformKey, "invalid_api_key"],
      ["revoked end-user key", revokedEndUserKey, "invalid_api_key"],
      ["deleted end user's key", deletedUserKey, "invalid_api_key"]
    ]
    for (const [kind, key, code] of dead) {
      for (const op of operations) {
        // A's own resources and B's: a dead key must not get past authentication on either.
        for (const target of [a, b]) {
          const res = await send(op, key, target)
          expect(res.status, label(op, kind)).toBe(401)
          expect(res.body?.error?.code, label(op, kind)).toBe(code)
          expectNothingOf(b, res, label(op, kind))
        }
        count(kind)
      }
    }
  })

  it("A's platform key: 404 on B's platform routes, 403 on the operator plane, nothing of B on shared routes", async () => {
    for (const op of operations) {
      const res = await send(op, a.platformKey, b)
      const what = label(op, "A platform key")
      if (isPlatformRoute(op)) {
        expect(res.status, what).toBe(404)
        expect(res.body.error.code, what).toBe("not_found")
      } else if (isAdminRoute(op)) {
        expect(res.status, what).toBe(403)
        expect(res.body.error.code, what).toBe("forbidden")
      } else {
        expect(isSharedRoute(op), what).toBe(true)
        expect(res.status, what).toBeLessThan(500)
      }
      expectNothingOf(b, res, what)
      count("A platform key")
    }
  })

  it("A's end-user key: 403 on B's platform routes and the operator plane, nothing of B on shared routes", async () => {
    for (const op of operations) {
      const res = await send(op, a.endUserKey, b)
      const what = label(op, "A end-user key")
      if (isPlatformRoute(op) || isAdminRoute(op)) {
        expect(res.status, what).toBe(403)
        expect(res.body.error.code, what).toBe("forbidden")
      } else {
        expect(isSharedRoute(op), what).toBe(true)
        expect(res.status, what).toBeLessThan(500)
      }
      expectNothingOf(b, res, what)
      count("A end-user key")
    }
  })

  it("previous_response_id of B's stored response: 404 for A's end user", async () => {
    const res = await gw.call("POST", "/v1/responses", {
      key: a.endUserKey,
      body: { model: "mock-echo", input: "continue", previous_response_id: b.responseId }
    })
    expect(res.status).toBe(404)
    expect(JSON.stringify(res.body)).not.toContain(`hello from ${b.name}`)
  })

  it("A's platform key on A's own routes with B's resource ids and filters: never B's rows", async () => {
    for (const op of operations.filter(isPlatformRoute)) {
      const res = await send(op, a.platformKey, a, b)
      const what = label(op, "A key, A path, B ids")
      const params = (op.path.match(/\{([^}]+)\}/g) ?? []).map((p) => p.slice(1, -1))
      const pointsAtB = params.some((p) => p === "endUserId" || p === "keyId" || p === "endpointId" || p === "deliveryId")
      if (pointsAtB) {
        expect(res.status, what).toBe(404)
      } else if (op.method === "POST" && op.path === "/v1/platforms/{platformId}/api-keys") {
        // end_user_id of B in A's platform: no key may be minted for B's user.
        expect(res.status, what).toBe(404)
      } else {
        expect(res.status, what).toBeLessThan(500)
      }
      expectNothingOf(b, res, what)
      count("A key, A path, B ids")
    }
  })

  it("B's rows are unchanged after the whole sweep", async () => {
    // last_used_at is batched every second; wait so nothing in flight lands after the read.
    await new Promise((r) => setTimeout(r, 1200))
    expect(await snapshot(b)).toEqual(before)
    // Nothing the sweep tried to create ended up under B.
    const created = await gw.db.pool.query(
      "SELECT count(*)::int AS n FROM end_users WHERE platform_id = $1 AND external_id = 'iso-intruder'",
      [b.platformId]
    )
    expect(created.rows[0].n).toBe(0)
    expect(checked.get("A platform key")).toBe(operations.length)
    expect(checked.get("A end-user key")).toBe(operations.length)
    expect(checked.get("expired platform key")).toBe(operations.length)
  })

  it("control: the same requests with the owner's keys are accepted (refusals above are isolation)", async () => {
    const c = await tenant("c")
    await enableCapabilities(c)
    const keyFor = (op: Operation) =>
      isAdminRoute(op) ? gw.adminKey : isPlatformRoute(op) || op.path === "/v1/platform" ? c.platformKey : c.endUserKey
    // Deletes last: the wallet before the budget it lives on, the end user at the very end (it cascades).
    const lastDeletes = ["/end-users/{endUserId}/wallet", "/end-users/{endUserId}/budget", "/end-users/{endUserId}"]
    const rank = (op: Operation) =>
      op.method !== "DELETE" ? 0 : 2 + lastDeletes.findIndex((suffix) => op.path.endsWith(suffix))
    const ordered = [...operations].sort((x, y) => rank(x) - rank(y))
    const refused: Array<string> = []
    for (const op of ordered) {
      const res = await send(op, keyFor(op), c)
      if (res.status >= 300 && !controlExceptions[`${op.method} ${op.path}`]?.includes(res.status)) {
        refused.push(`${op.method} ${op.path} -> ${res.status} ${JSON.stringify(res.body)}`)
      }
    }
    expect(refused).toEqual([])
  })
})

/** Owner calls that are refused for reasons of their own (not isolation), with the expected status. */
const controlExceptions: Record<string, Array<number>> = {
  // The tenant already has a budget: 409 means the request reached C's own user.
  "POST /v1/platforms/{platformId}/end-users/{endUserId}/budget": [409],
  // The capability is denylisted on purpose, so nothing calls out of the test.
  "POST /v1/capabilities/run": [402]
}
