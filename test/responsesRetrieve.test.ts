// Stored responses read back and deleted, and one model by id, with the official openai SDK:
// responses.retrieve (the object create answered), responses.inputItems.list (OpenAI's cursor
// list), responses.delete (gone for retrieve and previous_response_id, the money history kept),
// models.retrieve; another end user's, the platform key's and another platform's reads are 404.
import OpenAI, { NotFoundError } from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { createEndUser, createPlatform, type Gateway, ok, startGateway } from "./support/Gateway.js"

let gw: Gateway
let oa: FakeUpstream

interface Tenant {
  platformId: string
  platformKey: string
  endUserId: string
  endUserKey: string
  client: OpenAI
  platformClient: OpenAI
}

const sdk = (apiKey: string) => new OpenAI({ apiKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 })

beforeAll(async () => {
  oa = await startFakeOpenAi()
  gw = await startGateway()
  const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body })
  const price = { input_usd_per_mtok: 1, output_usd_per_mtok: 2 }
  ok(await admin("/v1/admin/providers", { slug: "mock", kind: "mock", base_url: "http://mock.invalid" }))
  ok(await admin("/v1/admin/providers", { slug: "oa", kind: "openai", base_url: oa.url }))
  // A provider no platform has a key for: its model is in the catalog but visible to nobody.
  ok(await admin("/v1/admin/providers", { slug: "keyless", kind: "openai", base_url: oa.url }))
  ok(await admin("/v1/admin/models", { slug: "mock-echo", providers: [{ provider: "mock", provider_model_id: "echo", ...price }] }))
  ok(await admin("/v1/admin/models", { slug: "gpt-fake", providers: [{ provider: "oa", provider_model_id: "gpt-x", ...price }] }))
  ok(await admin("/v1/admin/models", { slug: "hidden-model", providers: [{ provider: "keyless", provider_model_id: "h", ...price }] }))
})
afterAll(async () => {
  await gw?.close()
  await oa?.close()
})

const tenant = async (): Promise<Tenant> => {
  const { platformId, platformKey } = await createPlatform(gw)
  for (const slug of ["mock", "oa"]) {
    ok(await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/${slug}`, { key: platformKey, body: { api_key: `k-${slug}` } }))
  }
  await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } })
  const eu = await createEndUser(gw, platformId, platformKey, "retrieve-user")
  await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: 5 } })
  return { platformId, platformKey, ...eu, client: sdk(eu.endUserKey), platformClient: sdk(platformKey) }
}

/** The SDK call fails with a 404 whose OpenAI body has `code`. */
const expect404 = async (call: Promise<unknown>, code = "not_found") => {
  const error = await call.then(() => null, (e: unknown) => e)
  expect(error).toBeInstanceOf(NotFoundError)
  expect((error as NotFoundError).status).toBe(404)
  expect((error as NotFoundError).code).toBe(code)
}

const tools = [{ type: "function" as const, name: "get_weather", description: "weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: false }]

describe("responses.retrieve", () => {
  it("answers the response object create answered, JSON and streamed", async () => {
    const t = await tenant()
    const created = await t.client.responses.create({
      model: "mock-echo",
      input: "hello there",
      instructions: "be nice",
      temperature: 0.5,
      max_output_tokens: 64,
      thread_id: "thread-1"
    } as OpenAI.Responses.ResponseCreateParamsNonStreaming)
    const read = await t.client.responses.retrieve(created.id)
    expect(read).toEqual(created)
    expect(read.output_text).toBe("echo: hello there")
    expect(read).toMatchObject({ instructions: "be nice", temperature: 0.5, max_output_tokens: 64, thread_id: "thread-1" })

    const stream = t.client.responses.stream({ model: "mock-echo", input: "streamed" })
    for await (const _ of stream) { /* drain */ }
    const final = await stream.finalResponse()
    const readStreamed = await t.client.responses.retrieve(final.id)
    expect(readStreamed).toMatchObject({ id: final.id, status: "completed", output_text: "echo: streamed", usage: final.usage })
    // The SDK's stream helper adds `parsed` to each text part: the items are compared by id and text.
    expect(readStreamed.output.map((o) => o.id)).toEqual(final.output.map((o) => o.id))
    expect(readStreamed.output_text).toBe(final.output_text)
  })

  it("keeps a function call and the chain's previous_response_id", async () => {
    const t = await tenant()
    oa.reset()
    const first = await t.client.responses.create({ model: "gpt-fake", input: "weather in Paris?", tools })
    const call = first.output.find((o) => o.type === "function_call")
    if (call?.type !== "function_call") throw new Error("no function call")
    const second = await t.client.responses.create({
      model: "gpt-fake",
      previous_response_id: first.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: "sunny" }],
      tools
    })
    expect(await t.client.responses.retrieve(first.id)).toEqual(first)
    const read = await t.client.responses.retrieve(second.id)
    expect(read).toEqual(second)
    expect(read).toMatchObject({ previous_response_id: first.id, output_text: "done: sunny", tools })
  })

  it("another end user, the platform key and another platform get 404; an unknown id too", async () => {
    const t = await tenant()
    const mine = await t.client.responses.create({ model: "mock-echo", input: "secret" })
    const sibling = await createEndUser(gw, t.platformId, t.platformKey, "sibling")
    const other = await tenant()
    for (const stranger of [sdk(sibling.endUserKey), t.platformClient, other.client, other.platformClient]) {
      await expect404(stranger.responses.retrieve(mine.id))
      await expect404(stranger.responses.inputItems.list(mine.id))
      await expect404(stranger.responses.delete(mine.id))
    }
    await expect404(t.client.responses.retrieve("resp_unknown"))
    // The strangers' deletes removed nothing.
    expect((await t.client.responses.retrieve(mine.id)).id).toBe(mine.id)
    const raw = await gw.call("GET", `/v1/responses/${mine.id}`, { key: other.endUserKey })
    expect(raw.body).toEqual({ error: { message: "No such response", type: "invalid_request_error", code: "not_found", param: null } })
  })

  it("a platform key reads its own responses, and its end user's are not among them", async () => {
    const t = await tenant()
    const own = await t.platformClient.responses.create({ model: "mock-echo", input: "from the platform" })
    expect(await t.platformClient.responses.retrieve(own.id)).toEqual(own)
    await expect404(t.client.responses.retrieve(own.id))
  })
})

describe("responses.inputItems.list", () => {
  it("lists the input items newest first, pages with after and limit, asc on request", async () => {
    const t = await tenant()
    const input = ["one", "two", "three", "four", "five"].map((text) => ({ role: "user" as const, content: text }))
    const created = await t.client.responses.create({ model: "mock-echo", input })

    const firstPage = await t.client.responses.inputItems.list(created.id, { limit: 2 })
    // The list fields besides data and has_more, as the body carried them.
    const { body } = firstPage as unknown as { body: { object: string; first_id: string; last_id: string; has_more: boolean } }
    expect(body.object).toBe("list")
    expect(firstPage.data.map((i) => i.type === "message" ? i.content : null)).toEqual([
      [{ type: "input_text", text: "five" }],
      [{ type: "input_text", text: "four" }]
    ])
    expect(firstPage.data[0]).toMatchObject({ type: "message", role: "user" })
    expect(body).toMatchObject({ first_id: firstPage.data[0]!.id, last_id: firstPage.data[1]!.id, has_more: true })

    // The SDK's auto-pagination resumes `after` the last id until has_more is false.
    const all: Array<string> = []
    for await (const item of t.client.responses.inputItems.list(created.id, { limit: 2 })) {
      if (item.type === "message") all.push((item.content[0] as { text: string }).text)
    }
    expect(all).toEqual(["five", "four", "three", "two", "one"])

    const ids = firstPage.data.map((i) => i.id)
    expect(new Set(ids).size).toBe(2)
    const next = await t.client.responses.inputItems.list(created.id, { limit: 2, after: ids[1]! })
    expect(next.data.map((i) => i.type === "message" ? (i.content[0] as { text: string }).text : null)).toEqual(["three", "two"])

    const asc = await t.client.responses.inputItems.list(created.id, { order: "asc" })
    expect(asc.data.map((i) => i.type === "message" ? (i.content[0] as { text: string }).text : null)).toEqual(["one", "two", "three", "four", "five"])
    expect(asc.has_more).toBe(false)
    // The ids are the same on every read.
    expect(asc.data.at(-1)!.id).toBe(ids[0])
  })

  it("a string input is one user message; a function_call_output keeps its fields", async () => {
    const t = await tenant()
    oa.reset()
    const first = await t.client.responses.create({ model: "gpt-fake", input: "weather?", tools })
    const items = await t.client.responses.inputItems.list(first.id)
    expect(items.data).toEqual([{ id: expect.any(String), type: "message", role: "user", content: [{ type: "input_text", text: "weather?" }] }])
    const call = first.output.find((o) => o.type === "function_call")
    if (call?.type !== "function_call") throw new Error("no function call")
    const second = await t.client.responses.create({
      model: "gpt-fake",
      previous_response_id: first.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: "sunny" }],
      tools
    })
    const secondItems = await t.client.responses.inputItems.list(second.id)
    expect(secondItems.data).toEqual([{ id: expect.stringMatching(/^fco_/), type: "function_call_output", call_id: call.call_id, output: "sunny" }])
  })

  it("a bad limit, order or after is 422 naming the field", async () => {
    const t = await tenant()
    const created = await t.client.responses.create({ model: "mock-echo", input: "x" })
    const list = (query: string) => gw.call("GET", `/v1/responses/${created.id}/input_items?${query}`, { key: t.endUserKey })
    for (const [query, param] of [["limit=0", "limit"], ["limit=101", "limit"], ["order=up", "order"], ["after=msg_nope", "after"]] as const) {
      const res = await list(query)
      expect(res.status).toBe(422)
      expect(res.body.error.param).toBe(param)
    }
  })
})

describe("responses.delete", () => {
  it("answers {id, object, deleted}; the response is gone for retrieve and previous_response_id; its log row stays", async () => {
    const t = await tenant()
    const created = await t.client.responses.create({ model: "mock-echo", input: "forget me" })
    const raw = await gw.call("DELETE", `/v1/responses/${created.id}`, { key: t.endUserKey })
    expect(raw.status).toBe(200)
    expect(raw.body).toEqual({ id: created.id, object: "response", deleted: true })

    await expect404(t.client.responses.retrieve(created.id))
    await expect404(t.client.responses.inputItems.list(created.id))
    await expect404(t.client.responses.delete(created.id))
    const continued = await gw.call("POST", "/v1/responses", {
      key: t.endUserKey,
      body: { model: "mock-echo", input: "again", previous_response_id: created.id }
    })
    expect(continued.status).toBe(404)
    expect(continued.body.error).toMatchObject({ code: "not_found", param: "previous_response_id" })

    const logs = await gw.db.pool.query("SELECT request_type, billing_status FROM inference_logs WHERE platform_id = $1", [t.platformId])
    expect(logs.rows).toEqual([{ request_type: "response", billing_status: "billed" }])
  })

  it("a chain through a deleted response ends there: later turns carry only what came after it", async () => {
    const t = await tenant()
    oa.reset()
    const r1 = await t.client.responses.create({ model: "gpt-fake", input: "first" })
    const r2 = await t.client.responses.create({ model: "gpt-fake", input: "second", previous_response_id: r1.id })
    await t.client.responses.delete(r1.id)
    await t.client.responses.create({ model: "gpt-fake", input: "third", previous_response_id: r2.id })
    const sent = oa.requests[2]!.body.messages
    expect(sent.map((m: any) => `${m.role}:${m.content}`)).toEqual([
      "user:second",
      "assistant:Hello from the fake upstream",
      "user:third"
    ])
    expect((await t.client.responses.retrieve(r2.id)).previous_response_id).toBe(r1.id)
  })

  it("the SDK's delete resolves, and the platform key deletes its own responses", async () => {
    const t = await tenant()
    const mine = await t.client.responses.create({ model: "mock-echo", input: "a" })
    await t.client.responses.delete(mine.id)
    await expect404(t.client.responses.retrieve(mine.id))
    const own = await t.platformClient.responses.create({ model: "mock-echo", input: "b" })
    await t.platformClient.responses.delete(own.id)
    await expect404(t.platformClient.responses.retrieve(own.id))
  })
})

describe("models.retrieve", () => {
  it("answers a visible model as the list shows it; a hidden or unknown one is 404 model_not_found", async () => {
    const t = await tenant()
    const list = await t.client.models.list()
    const listed = list.data.find((m) => m.id === "gpt-fake")
    expect(listed).toBeDefined()
    for (const client of [t.client, t.platformClient]) {
      expect(await client.models.retrieve("gpt-fake")).toEqual(listed)
      expect(await client.models.retrieve("mock-echo")).toMatchObject({ id: "mock-echo", object: "model", owned_by: "mock" })
      await expect404(client.models.retrieve("hidden-model"), "model_not_found")
      await expect404(client.models.retrieve("no-such-model"), "model_not_found")
    }
    const raw = await gw.call("GET", "/v1/models/hidden-model", { key: t.endUserKey })
    expect(raw.body.error).toMatchObject({ code: "model_not_found", param: "model", type: "invalid_request_error" })
  })
})

describe("the OpenAPI document", () => {
  it("lists the stored-response and model routes", async () => {
    const res = await gw.call("GET", "/openapi.json")
    const paths = res.body.paths as Record<string, Record<string, unknown>>
    expect(Object.keys(paths["/v1/responses/{responseId}"] ?? {}).sort()).toEqual(["delete", "get"])
    expect(Object.keys(paths["/v1/responses/{responseId}/input_items"] ?? {})).toEqual(["get"])
    expect(Object.keys(paths["/v1/models/{model}"] ?? {})).toEqual(["get"])
    const list = paths["/v1/responses/{responseId}/input_items"]!["get"] as { parameters: Array<{ name: string }>; responses: Record<string, unknown> }
    expect(list.parameters.map((p) => p.name)).toEqual(expect.arrayContaining(["responseId", "limit", "order", "after"]))
    expect(Object.keys(list.responses)).toEqual(expect.arrayContaining(["200", "404", "422"]))
  })
})
