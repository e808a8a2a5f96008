// Every answer of the API listener carries an x-request-id (the client's X-Request-Id when
// well-formed, else one the gateway mints), the same id lands in the inference log row and on the
// request's server span; inference answers carry Server-Timing (gateway and upstream time). CORS
// (GATEWAY_CORS_ORIGINS) answers preflights on the routes an end-user key calls, and is off by default.
import { NodeSdk } from "@effect/opentelemetry"
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { ConfigProvider, Effect, Either } from "effect"
import OpenAI, { type APIError } from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { corsOrigins } from "../src/http/Cors.js"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { chatFronts, createEndUser, type Gateway, provisionOpenAiModel, startGateway } from "./support/Gateway.js"

const MINTED = /^req_[0-9a-f]{32}$/
const TIMING = /^gateway;dur=\d+\.\d, upstream;dur=\d+\.\d$/

let upstream: FakeUpstream
beforeAll(async () => {
  upstream = await startFakeOpenAi()
})
afterAll(async () => {
  await upstream?.close()
})

/** The x_request_id of the log row of the call that answered `completionId` (metadata.request_id). */
const loggedRequestId = async (gw: Gateway, completionId: string) => {
  const { rows } = await gw.db.pool.query("SELECT metadata FROM inference_logs WHERE metadata->>'request_id' = $1", [completionId])
  expect(rows).toHaveLength(1)
  return rows[0].metadata.x_request_id as string
}

describe.each(chatFronts)("request ids, chat completions served by the %s", (_front, frontRoute) => {
  const spans = new InMemorySpanExporter()
  let gw: Gateway
  let client: OpenAI
  let endUserKey: string

  beforeAll(async () => {
    gw = await startGateway({
      env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_CHAT_FRONT_ROUTE: frontRoute },
      tracing: NodeSdk.layer(() => ({ resource: { serviceName: "request-ids" }, spanProcessor: new SimpleSpanProcessor(spans) }))
    })
    const platform = await provisionOpenAiModel(gw, upstream.url, { provider: "fake", model: "fake-model" })
    endUserKey = (await createEndUser(gw, platform.platformId, platform.platformKey, "ids")).endUserKey
    client = new OpenAI({ apiKey: endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 })
  })
  afterAll(async () => {
    await gw?.close()
  })

  const ask = { model: "fake-model", messages: [{ role: "user" as const, content: "hi" }] }

  it("mints an id when the client sends none; the SDK reads it, the log row and the server span carry it", async () => {
    const { data, response } = await client.chat.completions.create(ask).withResponse()
    const id = response.headers.get("x-request-id")!
    expect(id).toMatch(MINTED)
    // What the SDK hands a caller on every answer object.
    expect((data as { _request_id?: string | null })._request_id).toBe(id)
    expect(await loggedRequestId(gw, data.id)).toBe(id)
    const server = spans.getFinishedSpans().filter((s) => s.attributes["http.request.header.x-request-id"] === id)
    expect(server.map((s) => s.name)).toEqual(["http.server POST"])
  })

  it("echoes a well-formed client id into the answer and the log row", async () => {
    const sent = "support:case-42.attempt_1"
    const { data, response } = await client.chat.completions.create(ask, { headers: { "X-Request-Id": sent } }).withResponse()
    expect(response.headers.get("x-request-id")).toBe(sent)
    expect(await loggedRequestId(gw, data.id)).toBe(sent)
  })

  it("replaces a malformed client id (spaces, quotes, over 128 characters) with a minted one", async () => {
    for (const sent of ["has space", "quote\"d", "x".repeat(129)]) {
      const { data, response } = await client.chat.completions.create(ask, { headers: { "X-Request-Id": sent } }).withResponse()
      const id = response.headers.get("x-request-id")!
      expect(id, sent).toMatch(MINTED)
      expect(await loggedRequestId(gw, data.id)).toBe(id)
    }
    const longest = "a".repeat(128)
    const { response } = await client.chat.completions.create(ask, { headers: { "X-Request-Id": longest } }).withResponse()
    expect(response.headers.get("x-request-id")).toBe(longest)
  })

  it("puts Server-Timing on JSON and SSE chat answers, the stream's with its head", async () => {
    const json = await client.chat.completions.create(ask).withResponse()
    expect(json.response.headers.get("server-timing")).toMatch(TIMING)
    const { data: stream, response } = await client.chat.completions.create({ ...ask, stream: true }, { headers: { "X-Request-Id": "stream-1" } }).withResponse()
    expect(response.headers.get("server-timing")).toMatch(TIMING)
    expect(response.headers.get("x-request-id")).toBe("stream-1")
    let completionId = ""
    for await (const chunk of stream) completionId = chunk.id
    expect(await loggedRequestId(gw, completionId)).toBe("stream-1")
  })

  it("puts x-request-id and Server-Timing on /v1/responses answers, JSON and SSE", async () => {
    const { data, response } = await client.responses.create({ model: "fake-model", input: "hi" }, { headers: { "X-Request-Id": "resp-json" } }).withResponse()
    expect(response.headers.get("x-request-id")).toBe("resp-json")
    expect(response.headers.get("server-timing")).toMatch(TIMING)
    expect(await loggedRequestId(gw, data.id)).toBe("resp-json")
    const streamed = await client.responses.create({ model: "fake-model", input: "hi", stream: true }, { headers: { "X-Request-Id": "resp-sse" } }).withResponse()
    expect(streamed.response.headers.get("x-request-id")).toBe("resp-sse")
    expect(streamed.response.headers.get("server-timing")).toMatch(TIMING)
    let responseId = ""
    for await (const event of streamed.data) if (event.type === "response.completed") responseId = event.response.id
    expect(await loggedRequestId(gw, responseId)).toBe("resp-sse")
  })

  it("carries an id on errors: 401 through the SDK, 422, unknown routes, other routes", async () => {
    const stranger = new OpenAI({ apiKey: "sk-eu_unknown", baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 })
    const refused = await stranger.chat.completions.create(ask).catch((e: unknown) => e)
    expect(refused).toBeInstanceOf(OpenAI.AuthenticationError)
    expect((refused as APIError).requestID).toMatch(MINTED)

    const invalid = await client.chat.completions.create({ model: "fake-model", messages: "hi" } as never, { headers: { "X-Request-Id": "bad-body" } })
      .catch((e: unknown) => e)
    expect((invalid as APIError).status).toBe(422)
    expect((invalid as APIError).requestID).toBe("bad-body")

    const unknown = await gw.call("GET", "/v1/nothing-here", { key: endUserKey, headers: { "x-request-id": "lost-1" } })
    expect(unknown.status).toBe(404)
    expect(unknown.headers.get("x-request-id")).toBe("lost-1")
    const health = await gw.call("GET", "/health")
    expect(health.headers.get("x-request-id")).toMatch(MINTED)
    expect(health.headers.get("server-timing")).toBeNull()
  })

  it("answers no CORS by default: preflights stay unknown routes, answers carry no CORS headers", async () => {
    const preflight = await gw.call("OPTIONS", "/v1/chat/completions", {
      headers: { origin: "https://app.example.com", "access-control-request-method": "POST" }
    })
    expect(preflight.status).toBe(404)
    expect(preflight.headers.get("access-control-allow-origin")).toBeNull()
    const models = await gw.call("GET", "/v1/models", { key: endUserKey, headers: { origin: "https://app.example.com" } })
    expect(models.status).toBe(200)
    expect(models.headers.get("access-control-allow-origin")).toBeNull()
  })
})

describe("CORS with GATEWAY_CORS_ORIGINS", () => {
  const app = "https://app.example.com"
  let gw: Gateway
  let endUserKey: string
  beforeAll(async () => {
    gw = await startGateway({ env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_CORS_ORIGINS: `${app}, http://localhost:3000` } })
    const platform = await provisionOpenAiModel(gw, upstream.url, { provider: "fake", model: "fake-model" })
    endUserKey = (await createEndUser(gw, platform.platformId, platform.platformKey, "browser")).endUserKey
  })
  afterAll(async () => {
    await gw?.close()
  })

  const preflight = (path: string, origin: string, headers = "authorization, content-type, x-stainless-os, x-request-id, x-custom") =>
    gw.call("OPTIONS", path, {
      headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": headers }
    })

  it("answers a preflight from an allowed origin with 204 and what the browser may send", async () => {
    for (const path of ["/v1/chat/completions", "/v1/responses", "/v1/models", "/v1/me/budget"]) {
      const res = await preflight(path, app)
      expect(res.status, path).toBe(204)
      expect(res.headers.get("access-control-allow-origin")).toBe(app)
      expect(res.headers.get("vary")).toContain("Origin")
      expect(res.headers.get("access-control-allow-methods")).toBe("GET, POST, DELETE")
      // The SDK's and the gateway's headers; not one it never reads.
      expect(res.headers.get("access-control-allow-headers")).toBe("authorization, content-type, x-stainless-os, x-request-id")
      expect(res.headers.get("access-control-max-age")).toBe("600")
      expect(res.headers.get("x-request-id")).toMatch(MINTED)
    }
  })

  it("refuses a preflight from another origin (403, no allow-origin)", async () => {
    const res = await preflight("/v1/chat/completions", "https://evil.example.com")
    expect(res.status).toBe(403)
    expect(res.body.error.code).toBe("forbidden")
    expect(res.headers.get("access-control-allow-origin")).toBeNull()
  })

  it("gives operator and platform routes no CORS: their preflight stays an unknown route", async () => {
    for (const path of ["/v1/admin/platforms", "/v1/platforms/00000000-0000-0000-0000-000000000000/end-users"]) {
      const res = await preflight(path, app)
      expect(res.status, path).toBe(404)
      expect(res.headers.get("access-control-allow-origin")).toBeNull()
    }
  })

  it("marks answers to an allowed origin, errors included, and exposes the headers SDKs read", async () => {
    const client = new OpenAI({ apiKey: endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0, defaultHeaders: { origin: app } })
    const { response } = await client.chat.completions.create({ model: "fake-model", messages: [{ role: "user", content: "hi" }] }).withResponse()
    expect(response.headers.get("access-control-allow-origin")).toBe(app)
    expect(response.headers.get("access-control-expose-headers")).toContain("x-request-id")
    expect(response.headers.get("access-control-expose-headers")).toContain("x-ratelimit-remaining-requests")
    expect(response.headers.get("access-control-expose-headers")).toContain("server-timing")
    const unauthorized = await gw.call("GET", "/v1/models", { key: "sk-eu_unknown", headers: { origin: app } })
    expect(unauthorized.status).toBe(401)
    expect(unauthorized.headers.get("access-control-allow-origin")).toBe(app)
    const other = await gw.call("GET", "/v1/models", { key: endUserKey, headers: { origin: "https://evil.example.com" } })
    expect(other.status).toBe(200)
    expect(other.headers.get("access-control-allow-origin")).toBeNull()
  })
})

describe("GATEWAY_CORS_ORIGINS parsing", () => {
  const read = (value: string) =>
    Effect.runSync(Effect.either(Effect.withConfigProvider(corsOrigins, ConfigProvider.fromMap(new Map([["GATEWAY_CORS_ORIGINS", value]])))))

  it("takes * or origins, and refuses anything with a path or without a scheme, naming the variable", () => {
    expect(read("")).toEqual(Either.right(null))
    expect(read("*")).toEqual(Either.right("*"))
    expect(read("https://App.example.com/, http://localhost:3000")).toEqual(Either.right(new Set(["https://app.example.com", "http://localhost:3000"])))
    for (const bad of ["app.example.com", "https://app.example.com/path", "ftp://x.example.com", "*, https://a.example.com"]) {
      const result = read(bad)
      expect(Either.isLeft(result), bad).toBe(true)
      expect(String(Either.isLeft(result) ? result.left : ""), bad).toContain("GATEWAY_CORS_ORIGINS")
    }
  })
})
