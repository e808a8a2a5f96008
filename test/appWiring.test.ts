// The app's wiring: services bring their own dependencies, and a service that several others
// depend on (the settlement queue, the admission cache, the webhook outbox, the MCP sessions,
// the rate limiter) is still built once per app. Each of them reads one setting while it is
// built, and nothing else reads it then: the number of reads is the number of builds.
import { ConfigProvider, Effect, Layer, ManagedRuntime } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mintKey } from "../layers/access/KeyFormat.js"
import { Listeners } from "../layers/platform/Listeners.js"
import { appLayer } from "../src/App.js"
import { createTestDatabase, type TestDatabase } from "./support/TestDatabase.js"

/** A configuration from `env` that counts the reads of each key. */
const countingConfig = (env: Record<string, string>) => {
  const reads = new Map<string, number>()
  const inner = ConfigProvider.fromMap(new Map(Object.entries(env))).flattened
  const provider = ConfigProvider.fromFlat(ConfigProvider.makeFlat({
    load: (path, config, split) => {
      const key = path.join(".")
      reads.set(key, (reads.get(key) ?? 0) + 1)
      return inner.load(path, config, split)
    },
    enumerateChildren: inner.enumerateChildren,
    patch: inner.patch
  }))
  return { provider, reads }
}

/** Settings each read exactly once while the service that owns them is built. */
const builtOnce = {
  Settlements: "GATEWAY_SETTLEMENT_JOURNAL",
  AdmissionCache: "GATEWAY_ADMISSION_CACHE_TTL",
  WebhookOutbox: "GATEWAY_WEBHOOK_RETRY_SCHEDULE",
  "ToolHost (MCP sessions)": "GATEWAY_MCP_MAX_SESSIONS",
  RateLimiter: "GATEWAY_RATE_LIMIT_ON_REDIS_ERROR",
  Crypto: "GATEWAY_ENCRYPTION_KEY",
  AdminKey: "GATEWAY_ADMIN_KEY"
} as const

describe("app wiring", () => {
  let db: TestDatabase
  let dataDir: string
  let runtime: ManagedRuntime.ManagedRuntime<Layer.Layer.Success<ReturnType<typeof appLayer>>, unknown>
  let reads: Map<string, number>
  let bound: Partial<Record<"api" | "tools", string>>

  beforeAll(async () => {
    db = await createTestDatabase()
    dataDir = mkdtempSync(join(tmpdir(), "gateway-wiring-data-"))
    const config = countingConfig({
      DATABASE_URL: db.url,
      PORT: "0",
      MCP_PORT: "0",
      HOST: "127.0.0.1",
      GATEWAY_ADMIN_KEY: mintKey("admin").raw,
      GATEWAY_DATA_DIR: dataDir,
      GATEWAY_DEMO: "false",
      DATABASE_POOL_SIZE: "4"
    })
    reads = config.reads
    runtime = ManagedRuntime.make(appLayer("all", Layer.empty).pipe(Layer.provide(Layer.setConfigProvider(config.provider))))
    bound = await runtime.runPromise(Effect.flatMap(Listeners, (listeners) => listeners.all))
  })

  afterAll(async () => {
    await runtime?.dispose()
    await db?.drop()
    rmSync(dataDir, { recursive: true, force: true })
  })

  it.each(Object.entries(builtOnce))("%s is built once per app (reads of %s)", (_service, key) => {
    expect(reads.get(key)).toBe(1)
  })

  it("the listeners record their bound addresses in the app's Listeners", () => {
    expect(bound.api).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    expect(bound.tools).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
  })
})
