// The compiled checks of the upstream wire schemas and of the chat request body
// (layers/lib/WireCheck.ts) against Schema itself: a value the check accepts is one Schema accepts
// (then it is used as it is), and the check accepts what Schema generates (else it would save
// nothing). Values: Schema's own arbitraries, the same with one node replaced by random JSON, and
// random JSON.
import { Arbitrary, Either, FastCheck as fc, Schema } from "effect"
import { describe, expect, it } from "vitest"
import { EventWire as AnthropicEventWire, MessageWire } from "../../layers/pipeline/upstream/Anthropic.js"
import { ChunkWire, CompletionWire } from "../../layers/pipeline/upstream/OpenAi.js"
import { EventWire as ResponsesEventWire, ResponseWire } from "../../layers/pipeline/upstream/OpenAiResponses.js"
import { compiledCheck } from "../../layers/lib/WireCheck.js"
import { ChatRequestBody } from "../../schemas/Chat.js"

const wires: Record<string, Schema.Schema<any, any, never>> = {
  CompletionWire,
  ChunkWire,
  MessageWire,
  AnthropicEventWire,
  ResponseWire,
  ResponsesEventWire
}

/** The value with its `k`-th node (depth first, modulo their number) replaced by `by`. */
const replaceNode = (value: unknown, by: unknown, k: number): unknown => {
  const nodes: Array<[unknown, string | number | null]> = []
  const walk = (node: unknown, parent: unknown, key: string | number | null) => {
    nodes.push([parent, key])
    if (Array.isArray(node)) node.forEach((child, i) => walk(child, node, i))
    else if (typeof node === "object" && node !== null) for (const [name, child] of Object.entries(node)) walk(child, node, name)
  }
  const copy = structuredClone(value)
  walk(copy, null, null)
  const [parent, key] = nodes[k % nodes.length]!
  if (parent === null) return by
  ;(parent as Record<string | number, unknown>)[key!] = by
  return copy
}

/** JSON as JSON.parse gives it (no -0, no undefined). */
const json = (value: unknown) => JSON.parse(JSON.stringify(value)) as unknown

describe("compiled wire checks", () => {
  for (const [name, schema] of Object.entries(wires)) {
    it(`${name}: accepts what Schema accepts, and nothing Schema refuses`, () => {
      const check = compiledCheck(schema)
      expect(check).toBeDefined()
      const is = Schema.is(schema)
      // As JSON carries them (NaN and infinities become null, which Schema then refuses).
      const valid = Arbitrary.make(schema).map(json).filter(is)
      fc.assert(fc.property(valid, (value) => check!(value)), { numRuns: 300 })
      const mutated = fc.tuple(valid, fc.jsonValue(), fc.nat()).map(([value, by, k]) => replaceNode(value, by, k))
      fc.assert(fc.property(fc.oneof(mutated, fc.jsonValue()), (value) => !check!(value) || is(value)), { numRuns: 1000 })
    })
  }

  it("integers past the safe range are refused, as Schema's Int refuses them", () => {
    const check = compiledCheck(ChunkWire)!
    expect(check({ choices: [{ index: 2 ** 60 }] })).toBe(false)
    expect(Schema.is(ChunkWire)({ choices: [{ index: 2 ** 60 }] })).toBe(false)
    expect(check({ choices: [{ index: 3 }], extra: "ignored" })).toBe(true)
  })

  it("a schema whose JSON Schema is not exact gets no compiled check", () => {
    expect(compiledCheck(Schema.Struct({ at: Schema.Date }))).toBeUndefined()
    expect(compiledCheck(Schema.Struct({ name: Schema.String.pipe(Schema.pattern(/^a/i)) }))).toBeUndefined()
    expect(compiledCheck(Schema.Struct({ name: Schema.String.pipe(Schema.maxLength(3)) }))).toBeUndefined()
    expect(compiledCheck(Schema.Record({ key: Schema.TemplateLiteral("x-", Schema.String), value: Schema.Number }))).toBeUndefined()
  })

  it("records, patterns and number bounds are checked as Schema checks them", () => {
    const check = compiledCheck(Schema.Struct({
      tags: Schema.Record({ key: Schema.String, value: Schema.Number }),
      name: Schema.String.pipe(Schema.pattern(/^[a-z]{1,3}$/)),
      share: Schema.Number.pipe(Schema.between(0, 1))
    }))!
    expect(check({ tags: { a: 1 }, name: "abc", share: 1 })).toBe(true)
    expect(check({ tags: { a: "1" }, name: "abc", share: 1 })).toBe(false)
    expect(check({ tags: {}, name: "abcd", share: 1 })).toBe(false)
    expect(check({ tags: {}, name: "ab", share: 1.5 })).toBe(false)
  })
})

describe("the chat request body's compiled check", () => {
  const check = compiledCheck(ChatRequestBody, "refuse")!
  const decode = Schema.decodeUnknownEither(ChatRequestBody)
  /** What the route relies on: a body the check takes is exactly what Schema decodes it to. */
  const sameAsSchema = (value: unknown) => {
    if (!check(value)) return true
    const decoded = decode(value)
    return Either.isRight(decoded) && JSON.stringify(sortKeys(decoded.right)) === JSON.stringify(sortKeys(value))
  }
  const sortKeys = (value: unknown): unknown =>
    Array.isArray(value)
      ? value.map(sortKeys)
      : typeof value === "object" && value !== null
      ? Object.fromEntries(Object.entries(value).sort(([a], [b]) => a < b ? -1 : 1).map(([k, v]) => [k, sortKeys(v)]))
      : value

  it("takes the bodies Schema generates, each exactly as Schema decodes it", () => {
    const valid = Arbitrary.make(ChatRequestBody).map(json).filter(Schema.is(ChatRequestBody))
    fc.assert(fc.property(valid, (value) => check(value) && sameAsSchema(value)), { numRuns: 300 })
  })

  it("takes nothing Schema refuses or would change", () => {
    const valid = Arbitrary.make(ChatRequestBody).map(json).filter(Schema.is(ChatRequestBody))
    const mutated = fc.tuple(valid, fc.jsonValue(), fc.nat()).map(([value, by, k]) => replaceNode(value, by, k))
    fc.assert(fc.property(fc.oneof(mutated, fc.jsonValue()), sameAsSchema), { numRuns: 2000 })
  })

  it("refuses unknown fields at any depth, out-of-range numbers and bad tool names", () => {
    const body = { model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 64, stream: true, stream_options: { include_usage: true } }
    expect(check(body)).toBe(true)
    expect(check({ ...body, n: 2 })).toBe(false)
    expect(check({ ...body, messages: [{ role: "user", content: "hi", extra: 1 }] })).toBe(false)
    expect(check({ ...body, max_tokens: 0 })).toBe(false)
    expect(check({ ...body, max_tokens: 1.5 })).toBe(false)
    expect(check({ ...body, temperature: 2.5 })).toBe(false)
    expect(check({ ...body, messages: [] })).toBe(false)
    expect(check({ ...body, stop: ["a", "b", "c", "d", "e"] })).toBe(false)
    expect(check({ ...body, tools: [{ type: "function", function: { name: "a b" } }] })).toBe(false)
    expect(check({ ...body, tools: [{ type: "function", function: { name: "lookup", parameters: { type: "object" } } }] })).toBe(true)
    expect(check({ ...body, response_format: { type: "json_schema", json_schema: { name: "x", schema: {} } } })).toBe(true)
    expect(check({ ...body, response_format: { type: "text", json_schema: {} } })).toBe(false)
  })
})
