// The mock-tools rules (layers/pipeline/upstream/Mock.ts) on plain requests: which tool, which arguments,
// the answer to a tool result, and that other mock model ids keep echoing.
import { Chunk, Effect, Stream } from "effect"
import { describe, expect, it } from "vitest"
import type { ChatRequest } from "../../schemas/Chat.js"
import { mockArguments, mockToolsAnswer, MockAdapter } from "../../layers/pipeline/upstream/Mock.js"

const tool = (name: string, parameters?: Record<string, unknown>) => ({
  type: "function" as const,
  function: { name, ...(parameters === undefined ? {} : { parameters }) }
})
const request = (content: string, extra: Partial<ChatRequest> = {}): ChatRequest => ({
  model: "mock-tools",
  messages: [{ role: "user", content }],
  ...extra
})

describe("mockArguments", () => {
  it("builds values by type: enum and const first, strings cut to maxLength, numbers at their minimum", () => {
    const schema = {
      type: "object",
      properties: {
        s: { type: "string" },
        short: { type: "string", maxLength: 3 },
        i: { type: "integer" },
        n: { type: "number", minimum: 0.5 },
        b: { type: "boolean" },
        e: { type: "string", enum: ["b", "a"] },
        c: { const: 7 },
        a: { type: "array", items: { type: "string" } },
        o: { type: "object", properties: { x: { type: "string" } } },
        nullable: { type: ["null", "integer"] },
        untyped: {}
      }
    }
    expect(mockArguments(schema, "héllo")).toEqual({
      s: "héllo",
      short: "hél",
      i: 1,
      n: 0.5,
      b: true,
      e: "b",
      c: 7,
      a: [],
      o: {},
      nullable: 1,
      untyped: null
    })
  })

  it("keeps only the required properties when the schema lists them; no schema gives {}", () => {
    const schema = { type: "object", properties: { a: { type: "string" }, b: { type: "boolean" } }, required: ["b", "missing"] }
    expect(mockArguments(schema, "t")).toEqual({ b: true })
    expect(mockArguments(undefined, "t")).toEqual({})
  })

  it("never splits a surrogate pair when cutting", () => {
    expect(mockArguments({ properties: { s: { type: "string", maxLength: 2 } } }, "a😀b")).toEqual({ s: "a😀" })
  })
})

describe("mockToolsAnswer", () => {
  it("picks the tool named in the message (case-insensitive), else the first", () => {
    const tools = [tool("alpha"), tool("beta")]
    const named = mockToolsAnswer(request("please call BETA now", { tools }))
    expect(named._tag === "Call" && named.call.function.name).toBe("beta")
    const first = mockToolsAnswer(request("nothing named", { tools }))
    expect(first._tag === "Call" && first.call.function.name).toBe("alpha")
  })

  it("answers a trailing tool result with the call's name, cut to 200 characters", () => {
    const answer = mockToolsAnswer({
      model: "mock-tools",
      tools: [tool("alpha")],
      messages: [
        { role: "user", content: "go" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_a", type: "function", function: { name: "alpha", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "call_a", content: [{ type: "text", text: "y".repeat(300) }] }
      ]
    })
    expect(answer).toEqual({ _tag: "Text", reply: `echo: alpha returned ${"y".repeat(200)}` })
  })
})

describe("the mock adapter by provider model id", () => {
  const call = (providerModelId: string) => ({
    baseUrl: "http://mock.invalid",
    apiKey: "k",
    providerModelId,
    timeoutMs: 1000,
    request: request("call alpha", { tools: [tool("alpha", { type: "object", properties: { q: { type: "string" } } })] })
  })

  it("mock-tools-1 calls the tool; mock-echo-1 still echoes with tools offered", async () => {
    const tools = await Effect.runPromise(MockAdapter.complete(call("mock-tools-1")))
    expect(tools.choices[0]).toMatchObject({
      finish_reason: "tool_calls",
      message: { role: "assistant", content: null, tool_calls: [{ type: "function", function: { name: "alpha", arguments: "{\"q\":\"call alpha\"}" } }] }
    })
    // 10 characters -> 3 prompt tokens; `alpha {"q":"call alpha"}` is 3 words.
    expect(tools.usage).toEqual({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 })
    const echo = await Effect.runPromise(MockAdapter.complete(call("mock-echo-1")))
    expect(echo.choices[0]).toEqual({ index: 0, message: { role: "assistant", content: "echo: call alpha" }, finish_reason: "stop" })
  })

  it("streams the call: role, the named delta, the arguments delta, finish, usage", async () => {
    const chunks = await Effect.runPromise(
      MockAdapter.stream({ ...call("mock-tools-1"), request: { ...call("mock-tools-1").request, stream: true } }).pipe(
        Effect.flatMap(Stream.runCollect),
        Effect.map(Chunk.toReadonlyArray)
      )
    )
    expect(chunks.map((c) => c.choices[0]?.delta ?? null)).toEqual([
      { role: "assistant", content: null },
      { tool_calls: [{ index: 0, id: expect.stringMatching(/^call_[0-9a-f]{32}$/), type: "function", function: { name: "alpha", arguments: "" } }] },
      { tool_calls: [{ index: 0, function: { arguments: "{\"q\":\"call alpha\"}" } }] },
      {},
      null
    ])
    expect(chunks[3]?.choices[0]?.finish_reason).toBe("tool_calls")
    expect(chunks[4]?.usage).toEqual({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 })
  })
})
