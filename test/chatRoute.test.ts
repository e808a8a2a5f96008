// POST /v1/chat/completions is served by its own route in front of HttpApi (src/inference/ChatRoute.ts):
// it must take every URL the HttpApi router would give the endpoint, answer the same checks in
// the same order with the same OpenAI-shaped errors as the HttpApi routes, and leave every other
// request to HttpApi.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { chatFronts, createEndUser, type Gateway, provisionOpenAiModel, startGateway } from "./support/Gateway.js"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"

let gw: Gateway
let upstream: FakeUpstream
let endUserKey: string
let platform: { platformId: string; platformKey: string }
describe.each(chatFronts)("served by the %s", (_front, frontRoute) => {
  beforeAll(async () => {
    upstream = await startFakeOpenAi()
    gw = await startGateway({ env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_CHAT_FRONT_ROUTE: frontRoute } })
    platform = await provisionOpenAiModel(gw, upstream.url, { provider: "fake", model: "fake-model" })
    endUserKey = (await createEndUser(gw, platform.platformId, platform.platformKey, "route")).endUserKey
  })
  afterAll(async () => {
    await gw?.close()
    await upstream?.close()
  })

  const body = { model: "fake-model", messages: [{ role: "user", content: "hi" }] }

  /** A raw request: the path goes out exactly as written (fetch would normalise it). */
  const raw = (path: string, options: { key?: string; body?: string; contentType?: string; method?: string } = {}) =>
    new Promise<{ status: number; body: any; headers: Record<string, unknown> }>((resolve, reject) => {
      const url = new URL(gw.baseUrl)
      const payload = options.body ?? JSON.stringify(body)
      import("node:http").then(({ request }) => {
        const req = request({
          host: url.hostname,
          port: url.port,
          method: options.method ?? "POST",
          path,
          headers: {
            ...(options.key === undefined ? {} : { authorization: `Bearer ${options.key}` }),
            "content-type": options.contentType ?? "application/json",
            "content-length": Buffer.byteLength(payload)
          }
        }, (res) => {
          let text = ""
          res.setEncoding("utf8")
          res.on("data", (part: string) => (text += part))
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text === "" ? null : JSON.parse(text), headers: res.headers }))
        })
        req.on("error", reject)
        req.end(payload)
      }, reject)
    })

  describe("which requests the chat route takes", () => {
    it("every URL the HttpApi router gives the endpoint: case, repeated and trailing slashes, escapes, query", async () => {
      for (const path of ["/v1/chat/completions", "/V1/Chat/Completions", "//v1//chat/completions/", "/v1/chat/%63ompletions", "/v1/chat/completions?trace=1", "/v1/chat/completions;x"]) {
        const res = await raw(path, { key: endUserKey })
        expect(res.status, path).toBe(200)
        expect(res.body.object, path).toBe("chat.completion")
      }
    })

    it("leaves the router's non-matches to HttpApi: an escaped slash is another path (404)", async () => {
      const res = await raw("/v1/chat%2Fcompletions", { key: endUserKey })
      expect(res.status).toBe(404)
      expect(res.body.error.code).toBe("not_found")
    })

    it("leaves other methods to HttpApi: GET is an unknown route", async () => {
      const res = await gw.call("GET", "/v1/chat/completions", { key: endUserKey })
      expect(res.status).toBe(404)
      expect(res.body.error.code).toBe("not_found")
    })

    it("keeps the endpoint in the OpenAPI document with its errors", async () => {
      const doc = await gw.call("GET", "/openapi.json")
      const op = doc.body.paths["/v1/chat/completions"].post
      expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(["200", "401", "402", "422", "429", "502", "504"]))
      expect(op.security).toEqual([{ bearer: [] }])
    })
  })

  describe("the checks in HttpApi's order, with its error bodies", () => {
    const expectError = (res: { status: number; body: any }, status: number, code: string) => {
      expect(res.status).toBe(status)
      expect(Object.keys(res.body)).toEqual(["error"])
      expect(Object.keys(res.body.error).sort()).toEqual(["code", "message", "param", "type"])
      expect(res.body.error.code).toBe(code)
    }

    it("body checks come first: a wrong content type is 415 even without a valid key", async () => {
      expectError(await raw("/v1/chat/completions", { key: "sk-eu_nope", contentType: "text/plain", body: "x" }), 415, "unsupported_media_type")
    })

    it("then the key: 401 before the payload is parsed", async () => {
      expectError(await raw("/v1/chat/completions", { body: "{" }), 401, "missing_api_key")
      expectError(await raw("/v1/chat/completions", { key: "sk-eu_nope", body: "{" }), 401, "invalid_api_key")
    })

    it("then the payload: 400 invalid_json, 422 naming the field", async () => {
      const notJson = await raw("/v1/chat/completions", { key: endUserKey, body: "{\"model\": " })
      expectError(notJson, 400, "invalid_json")
      expect(notJson.body.error.message).toMatch(/^The request body is not valid JSON: /)
      const invalid = await raw("/v1/chat/completions", { key: endUserKey, body: JSON.stringify({ ...body, temperature: 9 }) })
      expectError(invalid, 422, "validation_error")
      expect(invalid.body.error.param).toBe("temperature")
      expect(invalid.body.error.type).toBe("invalid_request_error")
    })

    it("then the caller: the operator key is 403 for a valid payload, 422 for an invalid one", async () => {
      expectError(await raw("/v1/chat/completions", { key: gw.adminKey }), 403, "forbidden")
      expectError(await raw("/v1/chat/completions", { key: gw.adminKey, body: "{}" }), 422, "validation_error")
    })

    it("answers errors as an HttpApi route does (same body for the same failure)", async () => {
      const chat = await raw("/v1/chat/completions", { key: "sk-eu_nope" })
      const management = await gw.call("GET", `/v1/platforms/${platform.platformId}`, { key: "sk-eu_nope" })
      expect(chat.status).toBe(management.status)
      expect(chat.body).toEqual(management.body)
      expect(chat.headers["content-type"]).toBe("application/json")
    })
  })
})
