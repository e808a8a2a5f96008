// What error answers, spans and logs disclose: an upstream echoing the provider key it was sent never
// shows it to the client, a span or a log line (the log gets the provider's text redacted); a request
// that fails its schema gets the field and a short reason, no schema text.
import { NodeSdk } from "@effect/opentelemetry"
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Cause, Layer, Logger, LogLevel } from "effect"
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type HostileUpstream, startHostileUpstream } from "./fakes/HostileUpstream.js"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

const PROVIDER_KEY = `sk-tenant-provider-${randomBytes(12).toString("hex")}`
/** What the hostile fake writes before the credentials it quotes. */
const ECHO_MARK = "invalid credentials"

const lines: Array<string> = []
const capture = Logger.make(({ annotations, cause, logLevel, message }) => {
  lines.push(JSON.stringify({
    level: logLevel.label,
    message,
    annotations: Object.fromEntries(annotations),
    cause: Cause.isEmpty(cause) ? "" : Cause.pretty(cause, { renderErrorCause: true })
  }))
})
const spans = new InMemorySpanExporter()

let gw: Gateway
let hostile: HostileUpstream
let platform: { platformId: string; platformKey: string }
let endUserKey: string

beforeAll(async () => {
  hostile = await startHostileUpstream()
  gw = await startGateway({
    tracing: Layer.mergeAll(
      Logger.replace(Logger.defaultLogger, capture),
      Logger.minimumLogLevel(LogLevel.Debug),
      NodeSdk.layer(() => ({ resource: { serviceName: "error-disclosure" }, spanProcessor: new SimpleSpanProcessor(spans) }))
    )
  })
  const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body })
  // Both wire formats point at the fake (it answers any path): Bearer for openai, x-api-key for anthropic.
  await admin("/v1/admin/providers", { slug: "echo-openai", kind: "openai", base_url: hostile.url })
  await admin("/v1/admin/providers", { slug: "echo-anthropic", kind: "anthropic", base_url: hostile.url })
  const price = { input_usd_per_mtok: 1, output_usd_per_mtok: 1 }
  await admin("/v1/admin/models", { slug: "via-openai", providers: [{ provider: "echo-openai", provider_model_id: "o-1", ...price }] })
  await admin("/v1/admin/models", { slug: "via-anthropic", providers: [{ provider: "echo-anthropic", provider_model_id: "a-1", ...price }] })
  platform = await createPlatform(gw)
  for (const slug of ["echo-openai", "echo-anthropic"]) {
    await gw.call("PUT", `/v1/platforms/${platform.platformId}/provider-keys/${slug}`, { key: platform.platformKey, body: { api_key: PROVIDER_KEY } })
  }
  await admin(`/v1/admin/platforms/${platform.platformId}/platform-wallet/topup`, { amount_usd: 10 })
  endUserKey = (await createEndUser(gw, platform.platformId, platform.platformKey, "disclosure-user")).endUserKey
})
afterAll(async () => {
  await gw?.close()
  await hostile?.close()
})

const chat = (model: string, stream: boolean) =>
  gw.call("POST", "/v1/chat/completions", {
    key: endUserKey,
    body: { model, messages: [{ role: "user", content: "hi" }], ...(stream ? { stream: true } : {}) }
  })

/** Every span as text: name, attributes, events (exceptions included) and status. */
const spanText = () =>
  spans.getFinishedSpans().map((s) => JSON.stringify({ name: s.name, attributes: s.attributes, events: s.events, status: s.status })).join("\n")

const cases = [
  { model: "via-openai", stream: false },
  { model: "via-openai", stream: true },
  { model: "via-anthropic", stream: false },
  { model: "via-anthropic", stream: true }
] as const

describe("an upstream that echoes the credentials it was sent", () => {
  it.each(cases)("a 401 quoting them: the client gets 502 with the status only ($model, stream $stream)", async ({ model, stream }) => {
    hostile.answer({ kind: "echoError", status: 401 })
    const res = await chat(model, stream)
    expect(res.status).toBe(502)
    expect(res.body.error).toEqual({ message: "The upstream provider answered 401", type: "api_error", code: "upstream_error", param: null })
    // The fake really had the key, in the header of its wire format.
    const sent = hostile.requests.at(-1)!.headers
    expect(model === "via-openai" ? sent.authorization : sent["x-api-key"]).toContain(PROVIDER_KEY)
    expect(JSON.stringify(res.body)).not.toContain(PROVIDER_KEY)
  })

  it.each(cases)("a 200 whose body is only an error quoting them: 502 in the gateway's words ($model, stream $stream)", async ({ model, stream }) => {
    hostile.answer({ kind: "echoInOk" })
    const res = await chat(model, stream)
    expect(res.status).toBe(502)
    expect(res.body.error.code).toBe("upstream_error")
    expect(res.body.error.message).toMatch(/^The upstream provider (reported an error|sent an answer the gateway could not use)$/)
    expect(JSON.stringify(res.body)).not.toContain(PROVIDER_KEY)
    expect(JSON.stringify(res.body)).not.toContain(ECHO_MARK)
  })

  it("the key is in no span and no log line; the log has the provider's text, redacted; spans have none of it", async () => {
    hostile.answer({ kind: "echoError", status: 401 })
    expect((await chat("via-openai", false)).status).toBe(502)
    await expect.poll(() => spans.getFinishedSpans().some((s) => s.name === "ProviderRouter.attempt")).toBe(true)

    const logged = lines.join("\n")
    expect(logged).not.toContain(PROVIDER_KEY)
    expect(spanText()).not.toContain(PROVIDER_KEY)
    // Nothing of the provider's body reaches a span (attributes, events, exception, status)...
    expect(spanText()).not.toContain(ECHO_MARK)
    // ...though the failed attempt is recorded there, in the gateway's words.
    const attempt = spans.getFinishedSpans().filter((s) => s.name === "ProviderRouter.attempt").at(-1)!
    expect(attempt.status.message).toBe("upstream answered 401")
    // The operator's log has what the provider said, with the credentials blanked.
    const failure = lines.map((l) => JSON.parse(l)).filter((l) => l.message?.[0] === "upstream attempt failed").at(-1)
    expect(failure).toMatchObject({
      level: "WARN",
      annotations: { "upstream.provider": "echo-openai", "upstream.status": 401, "upstream.error": "upstream answered 401" }
    })
    expect(failure.annotations["upstream.detail"]).toContain(`${ECHO_MARK}: authorization=Bearer [redacted]`)
  })
})

describe("requests that fail their schema", () => {
  /** Schema's rendering of types and refinements, and the echo of a value: none may reach the client. */
  const SCHEMA_TEXT = /readonly|Expected|actual|Brand<|ReadonlyArray|minLength|\{ /

  it("422 validation_error with the field and a short reason, on the chat route and an HttpApi route", async () => {
    const sent = "ZZZ-value-sent-by-client"
    const answers = [
      [await gw.call("POST", "/v1/chat/completions", { key: endUserKey, body: [1, 2] }), undefined, "body: must be an object"],
      [
        await gw.call("POST", "/v1/chat/completions", { key: endUserKey, body: { model: "via-openai", messages: [{ role: sent, content: "x" }] } }),
        "messages.0.role",
        "messages.0.role: must be one of: system, user, assistant, tool, developer"
      ],
      [
        await gw.call("POST", `/v1/platforms/${platform.platformId}/end-users`, { key: platform.platformKey, body: { external_id: 42 } }),
        "external_id",
        "external_id: must be a string"
      ],
      [
        await gw.call("POST", `/v1/platforms/${platform.platformId}/end-users`, { key: platform.platformKey, body: { external_id: "x".repeat(300) } }),
        "external_id",
        "external_id: must be at most 255 characters long"
      ]
    ] as const
    for (const [res, param, message] of answers) {
      expect(res.status).toBe(422)
      expect(res.body.error).toEqual({ message, type: "invalid_request_error", code: "validation_error", param: param ?? null })
      expect(res.body.error.message).not.toMatch(SCHEMA_TEXT)
      expect(res.body.error.message).not.toContain(sent)
    }
  })

  it("the full schema issue goes to the server log, at debug level", async () => {
    await gw.call("POST", `/v1/platforms/${platform.platformId}/end-users`, { key: platform.platformKey, body: { external_id: 42 } })
    const logged = lines.map((l) => JSON.parse(l)).filter((l) => l.message?.[0] === "request did not match its schema").at(-1)
    expect(logged).toMatchObject({ level: "DEBUG", annotations: { "validation.param": "external_id" } })
    expect(logged.annotations["validation.issue"]).toMatch(/Expected string, actual 42/)
  })
})
