// The Responses API request shapes as SDKs send them: structured output through `text.format`
// (the openai SDK's responses.parse with zodTextFormat, the AI SDK's generateObject on its default
// Responses provider), streamed and not, over each upstream kind; image and file content parts;
// bad shapes refused with a 422 naming the field, reaching no upstream and billing nothing.
import { createOpenAI } from "@ai-sdk/openai"
import { generateObject, streamObject } from "ai"
import { zodTextFormat } from "openai/helpers/zod"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { z } from "zod"
import type { FakeUpstream } from "./fakes/FakeOpenAi.js"
import type { Gateway } from "./support/Gateway.js"
import { type ResponsesTenant, responsesTenant, type ResponsesWorld, startResponsesWorld } from "./support/ResponsesWorld.js"

let world: ResponsesWorld
let gw: Gateway
let oa: FakeUpstream
let anth: FakeUpstream
let resp: FakeUpstream
type Tenant = ResponsesTenant

beforeAll(async () => {
  world = await startResponsesWorld()
  ;({ gw, oa, anth, resp } = world)
})
afterAll(async () => {
  await world?.close()
})

const tenant = () => responsesTenant(gw, "shapes-user")

/** What the tenant was billed and logged: unchanged by a refused call. */
const ledger = async (t: Tenant) => {
  const q = (text: string) => gw.db.pool.query(text, [t.platformId]).then((r) => r.rows[0])
  return {
    used: (await gw.db.pool.query("SELECT used_usd::text FROM budgets WHERE end_user_id = $1", [t.endUserId])).rows[0]?.used_usd,
    wallet: (await q("SELECT balance_usd::text AS v FROM platform_wallets WHERE platform_id = $1"))?.v,
    logs: (await q("SELECT count(*)::int AS n FROM inference_logs WHERE platform_id = $1")).n,
    debits: (await q("SELECT count(*)::int AS n FROM budget_transactions WHERE platform_id = $1 AND type = 'debit'")).n
  }
}

const Weather = z.object({ city: z.string(), temperature: z.number(), sunny: z.boolean() })
const format = zodTextFormat(Weather, "weather")

// A 1x1 PNG.
const PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
const dataUrl = `data:image/png;base64,${PNG}`

const lastUpstreamBody = (fake: FakeUpstream) => fake.requests.at(-1)!.body

describe("structured output: text.format json_schema (flat)", () => {
  it("responses.parse over an openai-responses upstream: text.format passes through natively", async () => {
    const t = await tenant()
    resp.reset()
    resp.setBehavior({ reply: "Paris" })
    const res = await t.client.responses.parse({ model: "resp-fake", input: "weather in Paris?", text: { format } })
    expect(res.output_parsed).toEqual({ city: "Paris", temperature: 42, sunny: true })
    expect(JSON.parse(res.output_text)).toEqual(res.output_parsed)
    expect(res.text?.format).toEqual(format)
    expect(lastUpstreamBody(resp).text).toEqual({ format: { type: "json_schema", name: "weather", schema: format.schema, strict: true } })
  })

  it("responses.parse over an openai (chat) upstream: translated to response_format.json_schema", async () => {
    const t = await tenant()
    oa.reset()
    oa.setBehavior({ reply: "Oslo" })
    const res = await t.client.responses.parse({ model: "gpt-fake", input: "weather in Oslo?", text: { format } })
    expect(res.output_parsed).toEqual({ city: "Oslo", temperature: 42, sunny: true })
    expect(res.text?.format).toEqual(format)
    expect(lastUpstreamBody(oa).response_format).toEqual({
      type: "json_schema",
      json_schema: { name: "weather", schema: format.schema, strict: true }
    })
  })

  it("streamed (responses.stream with a zod text format) over both kinds: output_parsed on the final response", async () => {
    const t = await tenant()
    for (const [model, fake, city] of [["resp-fake", resp, "Rome"], ["gpt-fake", oa, "Lima"]] as const) {
      fake.reset()
      fake.setBehavior({ reply: city })
      const stream = t.client.responses.stream({ model, input: `weather in ${city}?`, text: { format } })
      let deltas = ""
      for await (const e of stream) if (e.type === "response.output_text.delta") deltas += e.delta
      const final = await stream.finalResponse()
      expect(final.output_parsed).toEqual({ city, temperature: 42, sunny: true })
      expect(JSON.parse(deltas)).toEqual(final.output_parsed)
      expect(final.text?.format).toEqual(format)
      expect(lastUpstreamBody(fake).stream).toBe(true)
    }
  })

  it("the mock model answers an object its schema asks for", async () => {
    const t = await tenant()
    const res = await t.client.responses.parse({ model: "mock-echo", input: "Berlin", text: { format } })
    expect(res.output_parsed).toEqual({ city: "Berlin", temperature: 1, sunny: true })
  })

  it("an anthropic upstream gets the schema as a system instruction", async () => {
    const t = await tenant()
    anth.reset()
    const res = await t.client.responses.create({ model: "claude-fake", input: "weather?", instructions: "be brief", text: { format } })
    expect(res.status).toBe("completed")
    const system: string = lastUpstreamBody(anth).system
    expect(system.startsWith("be brief\n\n")).toBe(true)
    expect(system).toContain(`JSON schema: ${JSON.stringify(format.schema)}`)
  })

  it("text.format text and json_object; the spec's response_format still works and is echoed flat", async () => {
    const t = await tenant()
    const plain = await t.client.responses.create({ model: "mock-echo", input: "hi", text: { format: { type: "text" } } })
    expect(plain.output_text).toBe("echo: hi")
    expect(plain.text?.format).toEqual({ type: "text" })
    const json = await t.client.responses.create({ model: "mock-echo", input: "hi", text: { format: { type: "json_object" } } })
    expect(JSON.parse(json.output_text)).toEqual({ echo: "hi" })
    const spec = await gw.call("POST", "/v1/responses", {
      key: t.endUserKey,
      body: { model: "mock-echo", input: "hi", response_format: { type: "json_schema", json_schema: { name: "w", schema: Weather.toJSONSchema() } } }
    })
    expect(spec.status).toBe(200)
    expect(spec.body.text.format).toMatchObject({ type: "json_schema", name: "w", schema: { type: "object" } })
    expect(JSON.parse(spec.body.output[0].content[0].text)).toEqual({ city: "hi", temperature: 1, sunny: true })
    const specJson = await gw.call("POST", "/v1/responses", { key: t.endUserKey, body: { model: "mock-echo", input: "hi", response_format: { type: "json_object" } } })
    expect(JSON.parse(specJson.body.output[0].content[0].text)).toEqual({ echo: "hi" })
    expect(specJson.body.text.format).toEqual({ type: "json_object" })
    const none = await t.client.responses.create({ model: "mock-echo", input: "hi" })
    expect(none.text?.format).toEqual({ type: "text" })
  })
})

describe("the AI SDK on its default (Responses) provider", () => {
  const provider = (t: Tenant) => createOpenAI({ baseURL: `${gw.baseUrl}/v1`, apiKey: t.endUserKey })

  it("generateObject with a zod schema returns the object, over openai-responses and openai upstreams", async () => {
    const t = await tenant()
    for (const [model, fake, city] of [["resp-fake", resp, "Kyiv"], ["gpt-fake", oa, "Quito"]] as const) {
      fake.reset()
      fake.setBehavior({ reply: city })
      const { object } = await generateObject({ model: provider(t)(model), schema: Weather, prompt: `weather in ${city}?`, maxRetries: 0 })
      expect(object).toEqual({ city, temperature: 42, sunny: true })
      expect(fake.requests).toHaveLength(1)
    }
  })

  it("streamObject returns the object", async () => {
    const t = await tenant()
    oa.reset()
    oa.setBehavior({ reply: "Cairo" })
    const errors: Array<unknown> = []
    const result = streamObject({
      model: provider(t)("gpt-fake"),
      schema: Weather,
      prompt: "weather in Cairo?",
      maxRetries: 0,
      onError: ({ error }) => void errors.push(error)
    })
    const partials: Array<unknown> = []
    for await (const partial of result.partialObjectStream) partials.push(partial)
    expect(errors).toEqual([])
    expect(partials.length).toBeGreaterThan(0)
    expect(await result.object).toEqual({ city: "Cairo", temperature: 42, sunny: true })
    expect(lastUpstreamBody(oa).stream).toBe(true)
  })
})

describe("content parts: input_text, input_image, input_file", () => {
  const imageInput = (detail?: "low" | "high" | "auto") => [{
    role: "user" as const,
    content: [
      { type: "input_text" as const, text: "what is this?" },
      { type: "input_image" as const, image_url: dataUrl, detail: detail ?? "auto" }
    ]
  }]

  it("input_image (a data URL) reaches each upstream kind in its own shape", async () => {
    const t = await tenant()
    resp.reset()
    oa.reset()
    anth.reset()
    await t.client.responses.create({ model: "resp-fake", input: imageInput("low") })
    expect(lastUpstreamBody(resp).input).toEqual([{
      role: "user",
      content: [{ type: "input_text", text: "what is this?" }, { type: "input_image", image_url: dataUrl, detail: "low" }]
    }])
    await t.client.responses.create({ model: "gpt-fake", input: imageInput("high") })
    expect(lastUpstreamBody(oa).messages).toEqual([{
      role: "user",
      content: [{ type: "text", text: "what is this?" }, { type: "image_url", image_url: { url: dataUrl, detail: "high" } }]
    }])
    await t.client.responses.create({ model: "claude-fake", input: imageInput() })
    expect(lastUpstreamBody(anth).messages).toEqual([{
      role: "user",
      content: [{ type: "text", text: "what is this?" }, { type: "image", source: { type: "base64", media_type: "image/png", data: PNG } }]
    }])
    const echoed = await t.client.responses.create({ model: "mock-echo", input: imageInput() })
    expect(echoed.output_text).toBe("echo: what is this?")
  })

  it("an image by URL, streamed, and kept in the stored chain for the next turn", async () => {
    const t = await tenant()
    oa.reset()
    const url = "https://images.example/cat.png"
    const stream = t.client.responses.stream({ model: "gpt-fake", input: [{ role: "user", content: [{ type: "input_image", image_url: url, detail: "auto" }] }] })
    const first = await stream.finalResponse()
    expect(lastUpstreamBody(oa).messages[0].content).toEqual([{ type: "image_url", image_url: { url, detail: "auto" } }])
    await t.client.responses.create({ model: "gpt-fake", input: "and now?", previous_response_id: first.id })
    expect(lastUpstreamBody(oa).messages.map((m: any) => m.role)).toEqual(["user", "assistant", "user"])
    expect(lastUpstreamBody(oa).messages[0].content).toEqual([{ type: "image_url", image_url: { url, detail: "auto" } }])
  })

  it("input_file: passed natively to openai-responses, as a chat file part to openai; by URL or to anthropic a 422 naming the part, billing nothing", async () => {
    const t = await tenant()
    resp.reset()
    oa.reset()
    anth.reset()
    const pdf = "data:application/pdf;base64,JVBERi0xLjQK"
    const fileInput = (file: Record<string, string>) => [{
      role: "user" as const,
      content: [{ type: "input_text" as const, text: "summarise" }, { type: "input_file" as const, ...file }]
    }]
    await t.client.responses.create({ model: "resp-fake", input: fileInput({ file_url: "https://files.example/a.pdf" }) })
    expect(lastUpstreamBody(resp).input[0].content[1]).toEqual({ type: "input_file", file_url: "https://files.example/a.pdf" })
    await t.client.responses.create({ model: "gpt-fake", input: fileInput({ file_data: pdf, filename: "a.pdf" }) })
    expect(lastUpstreamBody(oa).messages[0].content[1]).toEqual({ type: "file", file: { file_data: pdf, filename: "a.pdf" } })

    const before = await ledger(t)
    const byUrl = await gw.call("POST", "/v1/responses", {
      key: t.endUserKey,
      body: { model: "gpt-fake", input: fileInput({ file_url: "https://files.example/a.pdf" }) }
    })
    expect(byUrl.status).toBe(422)
    expect(byUrl.body.error).toMatchObject({ code: "unsupported_content", param: "input.0.content.1.file_url" })
    expect(byUrl.body.error.message).toContain("file_url")
    const toClaude = await gw.call("POST", "/v1/responses", { key: t.endUserKey, body: { model: "claude-fake", input: fileInput({ file_data: pdf }) } })
    expect(toClaude.status).toBe(422)
    expect(toClaude.body.error).toMatchObject({ code: "unsupported_content", param: "input.0.content.1" })
    expect(oa.requests).toHaveLength(1)
    expect(anth.requests).toHaveLength(0)
    expect(await ledger(t)).toEqual(before)
  })
})

describe("chat completions: the same parts", () => {
  it("image_url and file parts reach an openai upstream as sent; a file by URL is 422 naming the part", async () => {
    const t = await tenant()
    oa.reset()
    anth.reset()
    const content = [
      { type: "text" as const, text: "look" },
      { type: "image_url" as const, image_url: { url: dataUrl, detail: "low" as const } },
      { type: "file" as const, file: { file_data: "data:application/pdf;base64,JVBERi0xLjQK", filename: "a.pdf" } }
    ]
    await t.client.chat.completions.create({ model: "gpt-fake", messages: [{ role: "user", content }] })
    expect(lastUpstreamBody(oa).messages[0].content).toEqual(content)
    await t.client.chat.completions.create({ model: "claude-fake", messages: [{ role: "user", content: content.slice(0, 2) }] })
    expect(lastUpstreamBody(anth).messages[0].content[1]).toEqual({ type: "image", source: { type: "base64", media_type: "image/png", data: PNG } })
    const before = await ledger(t)
    const byUrl = await gw.call("POST", "/v1/chat/completions", {
      key: t.endUserKey,
      body: { model: "gpt-fake", messages: [{ role: "user", content: [{ type: "file", file: { file_url: "https://files.example/a.pdf" } }] }] }
    })
    expect(byUrl.status).toBe(422)
    expect(byUrl.body.error).toMatchObject({ code: "unsupported_content", param: "messages.0.content.0.file.file_url" })
    expect(oa.requests).toHaveLength(1)
    expect(await ledger(t)).toEqual(before)
  })
})

describe("bad shapes: 422 naming the field, nothing billed", () => {
  it("json_schema without schema, a bad image URL, an input_file with no source, an unknown part", async () => {
    const t = await tenant()
    resp.reset()
    const before = await ledger(t)
    const ask = (body: Record<string, unknown>) => gw.call("POST", "/v1/responses", { key: t.endUserKey, body: { model: "resp-fake", input: "x", ...body } })
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ text: { format: { type: "json_schema", name: "w" } } }, "text.format.schema"],
      [{ text: { format: { type: "json_schema", schema: {} } } }, "text.format.name"],
      [{ text: { format: { type: "xml" } } }, "text.format.type"],
      [{ input: [{ role: "user", content: [{ type: "input_image", image_url: "ftp://x/y.png" }] }] }, "input.0.content.0.image_url"],
      [{ input: [{ role: "user", content: [{ type: "input_image" }] }] }, "input.0.content.0.image_url"],
      [{ input: [{ role: "user", content: [{ type: "input_file", filename: "a.pdf" }] }] }, "input.0.content.0.file_data"],
      [{ input: [{ role: "user", content: [{ type: "input_text" }] }] }, "input.0.content.0.text"]
    ]
    for (const [body, param] of cases) {
      const res = await ask(body)
      expect(res.status, param).toBe(422)
      expect(res.body.error, param).toMatchObject({ type: "invalid_request_error", param })
      expect(res.body.error.message.startsWith(`${param}:`), res.body.error.message).toBe(true)
    }
    // The SDK's parse gets the same answer.
    await expect(t.client.responses.create({ model: "resp-fake", input: "x", text: { format: { type: "json_schema", name: "w" } as never } }))
      .rejects.toMatchObject({ status: 422 })
    expect(resp.requests).toHaveLength(0)
    expect(await ledger(t)).toEqual(before)
  })
})
