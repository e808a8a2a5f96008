// Starts the real gateway (both listeners on free ports) on a fresh database, and gives tests
// a small fetch helper. Everything goes over real HTTP.
import { ConfigProvider, Effect, Layer, ManagedRuntime } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { appLayer, type CoreLive } from "../../src/App.js"
import { Listeners } from "../../layers/platform/Listeners.js"
import { mintKey } from "../../layers/access/KeyFormat.js"
import { Settlements } from "../../layers/ledger/Settlements.js"
import { createTestDatabase, type TestDatabase } from "./TestDatabase.js"

export interface ApiResponse<T = any> {
  readonly status: number
  readonly body: T
  readonly headers: Headers
}

export interface CallOptions {
  readonly key?: string | undefined
  readonly body?: unknown
  readonly rawBody?: string
  readonly headers?: Record<string, string>
}

export interface Gateway {
  readonly baseUrl: string
  readonly toolsUrl: string
  readonly adminKey: string
  readonly db: TestDatabase
  readonly call: <T = any>(method: string, path: string, options?: CallOptions) => Promise<ApiResponse<T>>
  /** Runs an effect in the gateway's own runtime (its services, database and configuration), e.g. the demo seed. */
  readonly run: <A, E>(effect: Effect.Effect<A, E, Layer.Layer.Success<typeof CoreLive>>) => Promise<A>
  /** A second gateway instance on the same database (scale-out, restarts). */
  readonly startPeer: (env?: Record<string, string>) => Promise<Peer>
  readonly close: () => Promise<void>
}

export interface Peer {
  readonly baseUrl: string
  readonly toolsUrl: string
  readonly call: Gateway["call"]
  readonly close: () => Promise<void>
}

export interface StartOptions {
  readonly env?: Record<string, string>
  readonly tracing?: Layer.Layer<never, unknown>
  readonly db?: TestDatabase
}

/**
 * The two ways POST /v1/chat/completions can be served (GATEWAY_CHAT_FRONT_ROUTE): the chat tests
 * run the same requests through both and expect the same answers.
 */
export const chatFronts = [["front route", "true"], ["HttpApi handler", "false"]] as const

/** The answer when it has `status` (default 200); else fails with what came instead. */
export const ok = <T extends { status: number; body: any }>(res: T, status = 200): T => {
  if (res.status !== status) throw new Error(`expected ${status}, got ${res.status}: ${JSON.stringify(res.body)}`)
  return res
}

/** The request helper of the harness, against any base URL (in-process or a child process). */
export const callerFor = (baseUrl: string) =>
  async <T>(method: string, path: string, options: CallOptions = {}): Promise<ApiResponse<T>> => {
    const headers: Record<string, string> = { ...options.headers }
    if (options.key !== undefined) headers.authorization = `Bearer ${options.key}`
    let body: string | undefined
    if (options.rawBody !== undefined) body = options.rawBody
    else if (options.body !== undefined) {
      body = JSON.stringify(options.body)
      headers["content-type"] ??= "application/json"
    }
    const response = await fetch(`${baseUrl}${path}`, { method, headers, body: body ?? null })
    const text = await response.text()
    let parsed: unknown = text
    try {
      parsed = text === "" ? null : JSON.parse(text)
    } catch {
      // not JSON: keep the text
    }
    return { status: response.status, body: parsed as T, headers: response.headers }
  }

const launch = async (env: Record<string, string>, tracing: Layer.Layer<never, unknown> | undefined) => {
  const provider = ConfigProvider.fromMap(new Map(Object.entries(env)))
  const layer = appLayer("all", tracing).pipe(Layer.provide(Layer.setConfigProvider(provider)))
  const runtime = ManagedRuntime.make(layer)
  const bound = await runtime.runPromise(Effect.flatMap(Listeners, (l) => l.all))
  return { runtime, baseUrl: bound.api!, toolsUrl: bound.tools! }
}

export const startGateway = async (options: StartOptions = {}): Promise<Gateway> => {
  const db = options.db ?? await createTestDatabase()
  const dataDir = mkdtempSync(join(tmpdir(), "gateway-test-data-"))
  const adminKey = mintKey("admin").raw
  const env = {
    DATABASE_URL: db.url,
    PORT: "0",
    MCP_PORT: "0",
    HOST: "127.0.0.1",
    GATEWAY_ADMIN_KEY: adminKey,
    GATEWAY_DATA_DIR: dataDir,
    GATEWAY_DEMO: "false",
    DATABASE_POOL_SIZE: "8",
    ...options.env
  }
  const main = await launch(env, options.tracing)
  const peers: Array<Peer> = []
  const settled = () => main.runtime.runPromise(Effect.flatMap(Settlements, (s) => s.awaitEverything("30 seconds")))
  // Like the API's reads, the tests' direct reads first wait for the settlements the gateway has
  // queued (answers go out before their ledger rows are written).
  const settledPool = new Proxy(db.pool, {
    get: (target, name) =>
      name === "query"
        ? (...args: Parameters<typeof target.query>) => settled().then(() => (target.query as Function)(...args))
        : Reflect.get(target, name, target)
  })
  return {
    baseUrl: main.baseUrl,
    toolsUrl: main.toolsUrl,
    adminKey,
    db: { ...db, pool: settledPool },
    call: callerFor(main.baseUrl),
    run: (effect) => main.runtime.runPromise(effect),
    startPeer: async (extra = {}) => {
      const peer = await launch({ ...env, ...extra }, undefined)
      const handle: Peer = { baseUrl: peer.baseUrl, toolsUrl: peer.toolsUrl, call: callerFor(peer.baseUrl), close: () => peer.runtime.dispose() }
      peers.push(handle)
      return handle
    },
    close: async () => {
      for (const peer of peers) await peer.close()
      await main.runtime.dispose()
      if (options.db === undefined) await db.drop()
      rmSync(dataDir, { recursive: true, force: true })
    }
  }
}

/** Creates a platform through the operator API; returns its id and first platform key. */
export const createPlatform = async (gw: Gateway, body: Record<string, unknown> = { name: "Acme" }) => {
  const res = await gw.call("POST", "/v1/admin/platforms", { key: gw.adminKey, body })
  if (res.status !== 201) throw new Error(`createPlatform: ${res.status} ${JSON.stringify(res.body)}`)
  return { platformId: res.body.platform.id as string, platformKey: res.body.api_key.raw_key as string, body: res.body }
}

/** Creates an end user; returns the record and its raw key. */
export const createEndUser = async (gw: Gateway, platformId: string, platformKey: string, externalId: string) => {
  const res = await gw.call("POST", `/v1/platforms/${platformId}/end-users`, { key: platformKey, body: { external_id: externalId } })
  if (res.status !== 201) throw new Error(`createEndUser: ${res.status} ${JSON.stringify(res.body)}`)
  return { endUserId: res.body.id as string, endUserKey: res.body.api_key.raw_key as string, body: res.body }
}

/**
 * An `openai`-kind provider at `baseUrl` with one model (1 USD per million tokens both ways),
 * and a platform with its provider key and `walletUsd` in its wallet, ready for inference.
 */
export const provisionOpenAiModel = async (gw: Gateway, baseUrl: string, slugs: { provider: string; model: string }, walletUsd = 1) => {
  await gw.call("POST", "/v1/admin/providers", { key: gw.adminKey, body: { slug: slugs.provider, kind: "openai", base_url: baseUrl } })
  await gw.call("POST", "/v1/admin/models", {
    key: gw.adminKey,
    body: { slug: slugs.model, providers: [{ provider: slugs.provider, provider_model_id: "f-1", input_usd_per_mtok: 1, output_usd_per_mtok: 1 }] }
  })
  const platform = await createPlatform(gw)
  await gw.call("PUT", `/v1/platforms/${platform.platformId}/provider-keys/${slugs.provider}`, { key: platform.platformKey, body: { api_key: "k" } })
  await gw.call("POST", `/v1/admin/platforms/${platform.platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: walletUsd } })
  return platform
}

/** The mock provider and its `mock-echo` model (1 / 2 USD per million input / output tokens), by the operator API. */
export const catalogMockEcho = async (gw: Gateway, providerModelId = "echo-1") => {
  ok(await gw.call("POST", "/v1/admin/providers", { key: gw.adminKey, body: { slug: "mock", kind: "mock", base_url: "http://mock.invalid" } }))
  ok(await gw.call("POST", "/v1/admin/models", {
    key: gw.adminKey,
    body: { slug: "mock-echo", providers: [{ provider: "mock", provider_model_id: providerModelId, input_usd_per_mtok: 1, output_usd_per_mtok: 2 }] }
  }))
}

/**
 * Upserts (operator API) a capability with one HTTP provider; the provider's uid. The fields of
 * `capability` and `provider` override the defaults (a healthy provider at 0.01-0.03 USD).
 */
export const upsertCapability = async (
  gw: Gateway,
  capability: { readonly slug: string } & Record<string, unknown>,
  provider: { readonly slug: string; readonly url: string } & Record<string, unknown>
): Promise<string> => {
  const res = await gw.call("POST", "/v1/admin/capabilities/providers", {
    key: gw.adminKey,
    body: {
      capability: { name: capability.slug, description: `Capability ${capability.slug}`, domains: ["testing"], minted_by: "seed", ...capability },
      providers: [{
        name: provider.slug,
        description: `Provider ${provider.slug}`,
        call_method: "POST",
        protocol: "http",
        min_price_usd: 0.01,
        median_price_usd: 0.02,
        max_price_usd: 0.03,
        rating: 4,
        availability: "healthy",
        input_example: { q: "x" },
        input_schema: { type: "object" },
        ...provider
      }]
    }
  })
  if (res.status !== 200) throw new Error(`upsertCapability: ${res.status} ${JSON.stringify(res.body)}`)
  return res.body.providers[0].uid as string
}
