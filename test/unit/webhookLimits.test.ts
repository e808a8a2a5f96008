// The webhook dispatcher's limit variables: their names, defaults and formats (a misspelt name
// would silently leave the default in force).
import { ConfigProvider, Effect, Either } from "effect"
import { describe, expect, it } from "vitest"
import { dispatchLimitsConfig, maxEndpointsConfig } from "../../layers/ledger/WebhookOutbox.js"

const read = <A>(config: Effect.Effect<A, unknown>, env: Record<string, string>) =>
  Effect.runSync(Effect.either(config.pipe(Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))))

describe("webhook limits", () => {
  it("defaults: 10 s send timeout, 32 sends per instance, 8 per platform, 4 per endpoint, 20 endpoints per platform", () => {
    expect(read(dispatchLimitsConfig, {})).toEqual(
      Either.right({ sendTimeoutMs: 10_000, concurrency: 32, platformConcurrency: 8, endpointConcurrency: 4 })
    )
    expect(read(maxEndpointsConfig, {})).toEqual(Either.right(20))
  })

  it("reads each variable by its name, durations with units", () => {
    expect(read(dispatchLimitsConfig, {
      GATEWAY_WEBHOOK_TIMEOUT: "30s",
      GATEWAY_WEBHOOK_CONCURRENCY: "64",
      GATEWAY_WEBHOOK_PLATFORM_CONCURRENCY: "16",
      GATEWAY_WEBHOOK_ENDPOINT_CONCURRENCY: "2"
    })).toEqual(Either.right({ sendTimeoutMs: 30_000, concurrency: 64, platformConcurrency: 16, endpointConcurrency: 2 }))
    expect(read(maxEndpointsConfig, { GATEWAY_WEBHOOK_MAX_ENDPOINTS: "5" })).toEqual(Either.right(5))
  })

  it("refuses a zero bound or timeout, naming the variable", () => {
    for (const name of ["GATEWAY_WEBHOOK_TIMEOUT", "GATEWAY_WEBHOOK_CONCURRENCY", "GATEWAY_WEBHOOK_PLATFORM_CONCURRENCY", "GATEWAY_WEBHOOK_ENDPOINT_CONCURRENCY"]) {
      const refused = read(dispatchLimitsConfig, { [name]: "0" })
      expect(Either.isLeft(refused) && String(refused.left), name).toContain(name)
    }
    const refused = read(maxEndpointsConfig, { GATEWAY_WEBHOOK_MAX_ENDPOINTS: "0" })
    expect(Either.isLeft(refused) && String(refused.left)).toContain("GATEWAY_WEBHOOK_MAX_ENDPOINTS")
  })
})
