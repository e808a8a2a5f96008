// The chat route writes its typed answer as JSON without encoding it through ChatCompletion
// (src/inference/ChatRoute.ts). That is only the same text while the schema transforms nothing:
// this fails the day a field gets a transformation (a Date, a renamed key, a default), and then
// the route must encode again.
import { Schema, SchemaAST } from "effect"
import { expect, it } from "vitest"
import { ChatCompletion } from "../../schemas/Chat.js"

/** The AST's nodes that change a value between its type and its wire form (refinements only check). */
const transformations = (ast: SchemaAST.AST, path = "ChatCompletion"): Array<string> => {
  switch (ast._tag) {
    case "Transformation":
      return [path]
    case "Refinement":
      return transformations(ast.from, path)
    case "Suspend":
      return transformations(ast.f(), path)
    case "Union":
      return ast.types.flatMap((t, i) => transformations(t, `${path}|${i}`))
    case "TupleType":
      return [...ast.elements.map((e) => e.type), ...ast.rest.map((r) => r.type)]
        .flatMap((t, i) => transformations(t, `${path}[${i}]`))
    case "TypeLiteral":
      return [
        ...ast.propertySignatures.flatMap((p) => transformations(p.type, `${path}.${String(p.name)}`)),
        ...ast.indexSignatures.flatMap((s) => transformations(s.type, `${path}[*]`))
      ]
    default:
      return []
  }
}

it("ChatCompletion transforms nothing: the typed answer is its wire form", () => {
  expect(transformations(ChatCompletion.ast)).toEqual([])
  const answer: ChatCompletion = {
    id: "chatcmpl-1",
    object: "chat.completion",
    created: 1_700_000_000,
    model: "m",
    choices: [{
      index: 0,
      message: {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: "{}" } }]
      },
      finish_reason: "tool_calls"
    }],
    usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 }
  }
  expect(JSON.stringify(Schema.encodeSync(ChatCompletion)(answer))).toBe(JSON.stringify(answer))
})

it("would catch a transformation", () => {
  const WithDate = Schema.Struct({ at: Schema.Date, n: Schema.Int })
  expect(transformations(WithDate.ast, "WithDate")).toEqual(["WithDate.at"])
})
