// Agent models (a catalog flag): a /v1/responses call of one runs the hybrid loop with the
// caller's per-user tool URL's tools without the request naming them, its model calls logged as
// `agent`; a plain model gets none of them; chat completions and platform keys call an agent
// model as a plain model; the admin API takes and shows the flag.
import { createServer, type Server } from "node:http"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createEndUser, createPlatform, type Gateway, ok, startGateway } from "./support/Gateway.js"

let gw: Gateway
/**
 * A scripted upstream: offered `create_skill`, it calls it; given the tool's result, it answers
 * with it; offered nothing, it answers "plain answer". It keeps the request bodies it got.
 */
let upstream: Server
const received: Array<any> = []

const SKILL = { name: "Quokka care", description: "Feeding quokkas", body: "# Leaves" }

const completion = (body: any, message: Record<string, unknown>, finish: string) => ({
  id: `chatcmpl-scripted-${received.length}`,
  object: "chat.completion",
  created: 1,
  model: body.model,
  choices: [{ index: 0, finish_reason: finish, message: { role: "assistant", content: null, ...message } }],
  usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }
})

const answer = (body: any) => {
  const last = body.messages.at(-1)
  if (last.role === "tool") return completion(body, { content: `done: ${last.content}` }, "stop")
  const offered: Array<string> = (body.tools ?? []).map((t: any) => t.function.name)
  if (offered.includes("create_skill")) {
    const call = { id: `call_${received.length}`, type: "function", function: { name: "create_skill", arguments: JSON.stringify(SKILL) } }
    return completion(body, { tool_calls: [call] }, "tool_calls")
  }
  return completion(body, { content: "plain answer" }, "stop")
}

beforeAll(async () => {
  upstream = createServer((req, res) => {
    let raw = ""
    req.on("data", (c) => (raw += c))
    req.on("end", () => {
      const body = JSON.parse(raw)
      received.push(body)
      res.setHeader("content-type", "application/json")
      res.end(JSON.stringify(answer(body)))
    })
  })
  await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", () => r()))
  const address = upstream.address()
  const url = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}/v1`
  gw = await startGateway({ env: { GATEWAY_ALLOW_PRIVATE_URLS: "true" } })
  const price = { input_usd_per_mtok: 1, output_usd_per_mtok: 2 }
  ok(await gw.call("POST", "/v1/admin/providers", { key: gw.adminKey, body: { slug: "scripted", kind: "openai", base_url: url } }))
  for (const [slug, agent] of [["agent-bot", true], ["plain-bot", false]] as const) {
    ok(await gw.call("POST", "/v1/admin/models", {
      key: gw.adminKey,
      body: { slug, agent, providers: [{ provider: "scripted", provider_model_id: `${slug}-1`, ...price }] }
    }))
  }
})
afterAll(async () => {
  await gw?.close()
  await new Promise<void>((r) => upstream?.close(() => r()))
})

/** A platform with skills enabled (its users' per-user tool URL offers the skills tools) and an end user. */
const tenant = async () => {
  const { platformId, platformKey } = await createPlatform(gw, { name: "Agents", skills_enabled: true })
  ok(await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/scripted`, { key: platformKey, body: { api_key: "k" } }))
  ok(await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } }))
  const eu = await createEndUser(gw, platformId, platformKey, "agent-user")
  const client = new OpenAI({ apiKey: eu.endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 })
  return { platformId, platformKey, ...eu, client }
}

const requestTypes = async (platformId: string) =>
  (await gw.db.pool.query("SELECT request_type FROM inference_logs WHERE platform_id = $1 ORDER BY created_at", [platformId]))
    .rows.map((r) => r.request_type as string)

const skillsBy = async (endUserId: string) =>
  (await gw.db.pool.query("SELECT name FROM skills WHERE created_by = $1", [endUserId])).rows.map((r) => r.name as string)

const offeredTools = (body: any): Array<string> => (body.tools ?? []).map((t: any) => t.function.name)

describe("agent models", () => {
  it("an agent model calls a per-user tool the request did not name, then answers; each model call logs as `agent`", async () => {
    const t = await tenant()
    received.length = 0
    const res = await t.client.responses.create({ model: "agent-bot", input: "remember how to feed quokkas" })
    expect(res.status).toBe("completed")
    expect(res.output.map((o) => o.type)).toEqual(["mcp_call", "message"])
    const call = res.output[0] as any
    expect(call).toMatchObject({ type: "mcp_call", server_label: "gateway", name: "create_skill", status: "completed", error: null })
    expect(call.output).toContain("Quokka care")
    expect(res.output_text).toContain("Quokka care")
    // The per-user tools were offered on the first turn, and the tool ran as the calling user.
    expect(offeredTools(received[0])).toEqual(expect.arrayContaining(["find_skill", "create_skill", "fetch_skill"]))
    expect(await skillsBy(t.endUserId)).toEqual(["Quokka care"])
    expect(await requestTypes(t.platformId)).toEqual(["agent", "agent"])
    expect(res.usage).toMatchObject({ input_tokens: 20, output_tokens: 10, total_tokens: 30 })
  })

  it("the request's own tools come along, and a function tool of a per-user tool's name stays the client's", async () => {
    const t = await tenant()
    received.length = 0
    const res = await t.client.responses.create({
      model: "agent-bot",
      input: "remember how to feed quokkas",
      tools: [{ type: "function", name: "create_skill", parameters: { type: "object", properties: {} }, strict: false }]
    })
    expect(res.output.map((o) => o.type)).toEqual(["function_call"])
    expect(res.output[0]).toMatchObject({ type: "function_call", name: "create_skill" })
    const names = offeredTools(received[0])
    expect(names.filter((n) => n === "create_skill")).toHaveLength(1)
    expect(names).toContain("find_skill")
    expect(await skillsBy(t.endUserId)).toEqual([])
    expect(await requestTypes(t.platformId)).toEqual(["agent"])
  })

  it("streams the loop: the per-user server's tool discovery, the mcp_call, the answer", async () => {
    const t = await tenant()
    const raw = await fetch(`${gw.baseUrl}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${t.endUserKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "agent-bot", input: "remember how to feed quokkas", stream: true })
    })
    expect(raw.status).toBe(200)
    const events = (await raw.text()).split("\n\n").filter((m) => m.startsWith("event: "))
      .map((m) => JSON.parse(m.split("\n").find((l) => l.startsWith("data: "))!.slice(6)))
    const discovered = events.find((e) => e.type === "response.mcp_list_tools.completed")
    expect(discovered.server_label).toBe("gateway")
    expect(discovered.tools.map((tool: any) => tool.name)).toContain("create_skill")
    expect(events.map((e) => e.type)).toContain("response.mcp_call.completed")
    const done = events.at(-1)
    expect(done.type).toBe("response.completed")
    expect(done.response.output.map((o: any) => o.type)).toEqual(["mcp_call", "message"])
    expect(await requestTypes(t.platformId)).toEqual(["agent", "agent"])
  })

  it("a plain model gets no per-user tools; chat completions call an agent model as a plain model", async () => {
    const t = await tenant()
    received.length = 0
    const res = await t.client.responses.create({ model: "plain-bot", input: "remember how to feed quokkas" })
    expect(res.output_text).toBe("plain answer")
    expect(received[0].tools).toBeUndefined()

    const chat = await t.client.chat.completions.create({ model: "agent-bot", messages: [{ role: "user", content: "hi" }] })
    expect(chat.choices[0]!.message.content).toBe("plain answer")
    expect(received[1].tools).toBeUndefined()
    expect(await skillsBy(t.endUserId)).toEqual([])
    expect(await requestTypes(t.platformId)).toEqual(["response", "chat.completion"])
  })

  it("a platform key calls an agent model as a plain model (no end user, no per-user tools), logged as `agent`", async () => {
    const t = await tenant()
    received.length = 0
    const platform = new OpenAI({ apiKey: t.platformKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 })
    const res = await platform.responses.create({ model: "agent-bot", input: "remember how to feed quokkas" })
    expect(res.status).toBe("completed")
    expect(res.output_text).toBe("plain answer")
    expect(received[0].tools).toBeUndefined()
    expect(await requestTypes(t.platformId)).toEqual(["agent"])
  })
})

describe("the catalog flag", () => {
  it("the admin API takes and shows `agent` (false by default); /v1/models keeps OpenAI's shape", async () => {
    const listed = ok(await gw.call("GET", "/v1/admin/models", { key: gw.adminKey })).body.data
    expect(listed.find((m: any) => m.slug === "agent-bot").agent).toBe(true)
    expect(listed.find((m: any) => m.slug === "plain-bot").agent).toBe(false)

    const providers = [{ provider: "scripted", provider_model_id: "x-1" }]
    const created = ok(await gw.call("POST", "/v1/admin/models", { key: gw.adminKey, body: { slug: "flagged", agent: true, providers } }))
    expect(created.body).toMatchObject({ slug: "flagged", agent: true, serves: ["chat"] })
    // The upsert is declarative: a body without the flag makes a plain model.
    const replaced = ok(await gw.call("POST", "/v1/admin/models", { key: gw.adminKey, body: { slug: "flagged", providers } }))
    expect(replaced.body).toMatchObject({ id: created.body.id, agent: false })

    const notBoolean = await gw.call("POST", "/v1/admin/models", { key: gw.adminKey, body: { slug: "flagged", agent: "yes", providers } })
    expect(notBoolean.status).toBe(422)
    expect(notBoolean.body.error.param).toBe("agent")
    const embedder = await gw.call("POST", "/v1/admin/models", {
      key: gw.adminKey,
      body: { slug: "agent-embed", agent: true, serves: ["embeddings"], providers }
    })
    expect(embedder.status).toBe(422)
    expect(embedder.body.error).toMatchObject({ param: "agent" })

    const t = await tenant()
    const model = await t.client.models.retrieve("agent-bot")
    expect(Object.keys(model).sort()).toEqual(["created", "id", "object", "owned_by"])
  })
})
