// The HTTP surface itself: OpenAPI document, docs page, and clear OpenAI-shaped 4xx for
// unknown routes, malformed JSON, wrong content types and oversized bodies.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createPlatform, type Gateway, startGateway } from "./support/Gateway.js"

let gw: Gateway
let platform: { platformId: string; platformKey: string }
beforeAll(async () => {
  gw = await startGateway()
  platform = await createPlatform(gw)
})
afterAll(async () => {
  await gw?.close()
})

const expectOpenAiError = (body: any, code: string) => {
  expect(Object.keys(body)).toEqual(["error"])
  expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"])
  expect(body.error.code).toBe(code)
  expect(typeof body.error.message).toBe("string")
  expect(JSON.stringify(body)).not.toMatch(/\bat .*\.ts:\d+|node_modules|stack/i)
}

describe("OpenAPI and docs", () => {
  it("describes every endpoint with its schemas", async () => {
    const res = await gw.call("GET", "/openapi.json")
    expect(res.status).toBe(200)
    const paths = res.body.paths as Record<string, Record<string, any>>
    const expected: Array<[string, string]> = [
      ["/v1/admin/platforms", "post"],
      ["/v1/admin/platforms", "get"],
      ["/v1/admin/platforms/{platformId}", "get"],
      ["/v1/platforms/{platformId}", "get"],
      ["/v1/platforms/{platformId}", "patch"],
      ["/v1/platforms/{platformId}/api-keys", "get"],
      ["/v1/platforms/{platformId}/api-keys", "post"],
      ["/v1/platforms/{platformId}/api-keys/{keyId}", "get"],
      ["/v1/platforms/{platformId}/api-keys/{keyId}", "patch"],
      ["/v1/platforms/{platformId}/api-keys/{keyId}", "delete"],
      ["/v1/platforms/{platformId}/end-users", "get"],
      ["/v1/platforms/{platformId}/end-users", "post"],
      ["/v1/platforms/{platformId}/end-users/{endUserId}", "get"],
      ["/v1/platforms/{platformId}/end-users/{endUserId}", "patch"],
      ["/v1/platforms/{platformId}/end-users/{endUserId}", "delete"]
    ]
    for (const [path, method] of expected) {
      const op = paths[path]?.[method]
      expect(op, `${method} ${path}`).toBeDefined()
      expect(Object.keys(op.responses).length, `${method} ${path}`).toBeGreaterThan(1)
      expect(op.security).toEqual([{ bearer: [] }])
    }
    const createUser = paths["/v1/platforms/{platformId}/end-users"]!.post
    expect(Object.keys(createUser.responses)).toEqual(expect.arrayContaining(["200", "201", "401", "403", "404", "422"]))
    expect(createUser.requestBody.content["application/json"].schema).toBeDefined()
    expect(paths["/v1/platforms/{platformId}/api-keys/{keyId}"]!.delete.responses["204"]).toBeDefined()
  })

  it("serves a docs page that needs nothing but this host", async () => {
    const res = await fetch(`${gw.baseUrl}/docs`)
    expect(res.status).toBe(200)
    expect(res.headers.get("content-type")).toContain("text/html")
    const html = await res.text()
    expect(html).toContain("<html")
    // The API description is inline; every script the page loads is same-origin.
    expect(html).toContain('"/v1/chat/completions"')
    const sources = [...html.matchAll(/<script\b[^>]*\bsrc="([^"]*)"/g)].map((m) => m[1]!)
    expect(sources).toEqual(["/docs/scalar.js"])
    expect(html).not.toMatch(/<link\b[^>]*href="https?:/)
    // Scalar's own fonts would come from its servers.
    expect(html).toContain('"withDefaultFonts":false')

    const script = await fetch(new URL(sources[0]!, `${gw.baseUrl}/docs`))
    expect(script.status).toBe(200)
    expect(script.headers.get("content-type")).toBe("text/javascript; charset=utf-8")
    const body = await script.text()
    expect(body).toContain("@scalar/api-reference@")
    expect(body).not.toContain("sourceMappingURL")
    // It parses as JavaScript.
    expect(() => new Function(body)).not.toThrow()

    const etag = script.headers.get("etag")
    expect(etag).toMatch(/^"[0-9a-f]+-[0-9a-f]+"$/)
    const again = await fetch(`${gw.baseUrl}/docs/scalar.js`, { headers: { "if-none-match": etag! } })
    expect(again.status).toBe(304)
  })
})

describe("bad requests", () => {
  const path = () => `/v1/platforms/${platform.platformId}/end-users`

  it("unknown route: 404 with the OpenAI body", async () => {
    const res = await gw.call("GET", "/v1/no-such-thing", { key: platform.platformKey })
    expect(res.status).toBe(404)
    expectOpenAiError(res.body, "not_found")
    const tools = await fetch(`${gw.toolsUrl}/no-such-thing`)
    expect(tools.status).toBe(404)
    expectOpenAiError(await tools.json(), "not_found")
  })

  it("malformed JSON: 400 invalid_json", async () => {
    const res = await gw.call("POST", path(), {
      key: platform.platformKey,
      rawBody: "{\"external_id\": ",
      headers: { "content-type": "application/json" }
    })
    expect(res.status).toBe(400)
    expectOpenAiError(res.body, "invalid_json")
  })

  it("wrong content type: 415 unsupported_media_type", async () => {
    const res = await gw.call("POST", path(), {
      key: platform.platformKey,
      rawBody: "external_id=x",
      headers: { "content-type": "application/x-www-form-urlencoded" }
    })
    expect(res.status).toBe(415)
    expectOpenAiError(res.body, "unsupported_media_type")
  })

  it("oversized body: 413 payload_too_large, declared or streamed", async () => {
    const big = JSON.stringify({ external_id: "x", metadata: { blob: "a".repeat(11 * 1024 * 1024) } })
    const declared = await gw.call("POST", path(), {
      key: platform.platformKey,
      rawBody: big,
      headers: { "content-type": "application/json" }
    })
    expect(declared.status).toBe(413)
    expectOpenAiError(declared.body, "payload_too_large")

    // Chunked upload with no content-length: cut off while reading (413, or the connection is
    // reset because the server stops reading mid-upload); either way nothing is stored.
    const before = await gw.db.pool.query("SELECT count(*)::int AS n FROM end_users")
    const chunks = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(big))
        controller.close()
      }
    })
    const streamed = await fetch(`${gw.baseUrl}${path()}`, {
      method: "POST",
      headers: { authorization: `Bearer ${platform.platformKey}`, "content-type": "application/json" },
      body: chunks,
      duplex: "half"
    } as RequestInit).then((r) => r.status, (e: Error) => e.cause instanceof Error ? e.cause.message : e.message)
    expect(String(streamed)).toMatch(/^413$|ECONNRESET|EPIPE|other side closed/)
    const after = await gw.db.pool.query("SELECT count(*)::int AS n FROM end_users")
    expect(after.rows[0].n).toBe(before.rows[0].n)
  })

  it("schema failures: 422 validation_error naming the field", async () => {
    const res = await gw.call("POST", path(), { key: platform.platformKey, body: { external_id: 42 } })
    expect(res.status).toBe(422)
    expectOpenAiError(res.body, "validation_error")
    expect(res.body.error.param).toBe("external_id")
    const notObject = await gw.call("POST", path(), { key: platform.platformKey, body: [1, 2] })
    expect(notObject.status).toBe(422)
    expectOpenAiError(notObject.body, "validation_error")
  })

  it("text Postgres cannot store (NUL) is a 422 naming the field, not a 500", async () => {
    for (const [body, param] of [
      [{ external_id: "a\u0000b" }, "external_id"],
      [{ external_id: "ok-nul", display_name: "x\u0000" }, "display_name"],
      [{ external_id: "ok-nul", metadata: { k: ["a\u0000"] } }, "metadata.k.0"]
    ] as const) {
      const res = await gw.call("POST", path(), { key: platform.platformKey, body })
      expect(res.status, JSON.stringify(body)).toBe(422)
      expect(res.body.error.param).toBe(param)
    }
    const list = await gw.call("GET", `${path()}?external_id=a%00b`, { key: platform.platformKey })
    expect(list.status).toBe(422)
    expectOpenAiError(list.body, "validation_error")
  })

  it("a rejected request changes nothing", async () => {
    const before = await gw.db.pool.query("SELECT count(*)::int AS n FROM end_users")
    await gw.call("POST", path(), { key: platform.platformKey, rawBody: "{", headers: { "content-type": "application/json" } })
    await gw.call("POST", path(), { key: platform.platformKey, body: { external_id: "" } })
    await gw.call("POST", path(), { key: platform.platformKey, body: { external_id: "ok", bogus: 1 } })
    const after = await gw.db.pool.query("SELECT count(*)::int AS n FROM end_users")
    expect(after.rows[0].n).toBe(before.rows[0].n)
  })
})
