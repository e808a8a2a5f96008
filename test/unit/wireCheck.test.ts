// The compiled checks of the upstream wire schemas (layers/lib/WireCheck.ts) against Schema itself:
// a value the check accepts is one Schema accepts (then the adapters use it as it is), and the
// check accepts what Schema generates (else it would save nothing). Values: Schema's own
// arbitraries, the same with one node replaced by random JSON, and random JSON.
import { Arbitrary, FastCheck as fc, Schema } from "effect"
import { describe, expect, it } from "vitest"
import { EventWire as AnthropicEventWire, MessageWire } from "../../layers/pipeline/upstream/Anthropic.js"
import { ChunkWire, CompletionWire } from "../../layers/pipeline/upstream/OpenAi.js"
import { EventWire as ResponsesEventWire, ResponseWire } from "../../layers/pipeline/upstream/OpenAiResponses.js"
import { compiledCheck } from "../../layers/lib/WireCheck.js"

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
    expect(compiledCheck(Schema.Struct({ name: Schema.String.pipe(Schema.pattern(/^a/)) }))).toBeUndefined()
    expect(compiledCheck(Schema.Record({ key: Schema.String, value: Schema.Number }))).toBeUndefined()
  })
})
