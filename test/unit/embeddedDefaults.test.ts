// Defaults that follow DATABASE_URL: unset (the embedded database, a laptop demo) the gateway
// listens on loopback, runs the demo and allows private webhook/tool URLs; set (a server) it
// listens on every interface and refuses private URLs. An explicit value always wins, and an
// invalid one still fails.
import { Config, ConfigProvider, Effect, Either } from "effect"
import { describe, expect, it } from "vitest"
import { host } from "../../src/http/Server.js"
import { demoEnabled } from "../../src/Demo.js"
import { allowPrivateUrls } from "../../layers/lib/SsrfGuard.js"

const read = <A>(config: Config.Config<A>, env: Record<string, string>) =>
  Effect.runSync(Effect.either(Effect.withConfigProvider(config, ConfigProvider.fromMap(new Map(Object.entries(env))))))

const server = { DATABASE_URL: "postgres://db.internal/gateway" }

describe("defaults of the embedded database", () => {
  it("HOST: 127.0.0.1 without DATABASE_URL, 0.0.0.0 with it, HOST itself when set", () => {
    expect(read(host, {})).toEqual(Either.right("127.0.0.1"))
    expect(read(host, server)).toEqual(Either.right("0.0.0.0"))
    expect(read(host, { HOST: "0.0.0.0" })).toEqual(Either.right("0.0.0.0"))
    expect(read(host, { ...server, HOST: "10.0.0.5" })).toEqual(Either.right("10.0.0.5"))
  })

  it("GATEWAY_ALLOW_PRIVATE_URLS: on without DATABASE_URL, off with it, the explicit value when set, a bad value refused", () => {
    expect(read(allowPrivateUrls, {})).toEqual(Either.right(true))
    expect(read(allowPrivateUrls, server)).toEqual(Either.right(false))
    expect(read(allowPrivateUrls, { GATEWAY_ALLOW_PRIVATE_URLS: "false" })).toEqual(Either.right(false))
    expect(read(allowPrivateUrls, { ...server, GATEWAY_ALLOW_PRIVATE_URLS: "true" })).toEqual(Either.right(true))
    const bad = read(allowPrivateUrls, { GATEWAY_ALLOW_PRIVATE_URLS: "sometimes" })
    expect(Either.isLeft(bad) && String(bad.left)).toContain("GATEWAY_ALLOW_PRIVATE_URLS")
  })

  it("GATEWAY_DEMO: on without DATABASE_URL, off with it, the explicit value when set", () => {
    expect(read(demoEnabled, {})).toEqual(Either.right(true))
    expect(read(demoEnabled, server)).toEqual(Either.right(false))
    expect(read(demoEnabled, { GATEWAY_DEMO: "false" })).toEqual(Either.right(false))
  })
})
