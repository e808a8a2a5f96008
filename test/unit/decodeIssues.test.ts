// What a client is told about a body that does not match its schema (src/http/DecodeIssues.ts):
// the field and a short reason, for the project's real request schemas, issues formatted as
// HttpApi formats them; never the schema's rendering of types nor the value that was sent.
import { describe, expect, it } from "vitest"
import { Either, ParseResult, Schema } from "effect"
import { ChatRequestBody } from "../../schemas/Chat.js"
import { CreateEndUser, ListEndUsersParams } from "../../schemas/EndUsers.js"
import { CreatePlatform, UpdatePlatform } from "../../schemas/Platforms.js"
import { clientValidation } from "../../src/http/DecodeIssues.js"

const validationOf = <A, I>(schema: Schema.Schema<A, I, never>, value: unknown) => {
  const decoded = Schema.decodeUnknownEither(schema)(value)
  if (Either.isRight(decoded)) throw new Error("expected a decode failure")
  return clientValidation(ParseResult.ArrayFormatter.formatErrorSync(decoded.left))
}

/** Schema's own vocabulary, which must never reach a client. */
const SCHEMA_TEXT = /readonly|Expected|actual|Brand<|ReadonlyArray|minLength|between\(|Int &|\{ /

const chat = { model: "m", messages: [{ role: "user", content: "hi" }] }

describe("clientValidation", () => {
  it.each([
    [ChatRequestBody, [1, 2], undefined, "body: must be an object"],
    [ChatRequestBody, { messages: chat.messages }, "model", "model: is missing"],
    [ChatRequestBody, { ...chat, model: 3 }, "model", "model: must be a string"],
    [ChatRequestBody, { ...chat, temperature: 9 }, "temperature", "temperature: must be between 0 and 2"],
    [ChatRequestBody, { ...chat, temperature: "hot" }, "temperature", "temperature: must be a number"],
    [ChatRequestBody, { ...chat, max_tokens: 1.5 }, "max_tokens", "max_tokens: must be an integer"],
    [ChatRequestBody, { ...chat, max_tokens: 0 }, "max_tokens", "max_tokens: must be greater than 0"],
    [ChatRequestBody, { ...chat, messages: [{ role: "wizard", content: "x" }] }, "messages.0.role", "messages.0.role: must be one of: system, user, assistant, tool, developer"],
    [ChatRequestBody, { ...chat, tools: [{ type: "web" }] }, "tools.0.type", "tools.0.type: must be one of: function, mcp"],
    [ChatRequestBody, { ...chat, tools: [{ type: "function", function: { name: "no spaces!" } }] }, "tools.0.function.name", "tools.0.function.name: has an invalid format"],
    [CreateEndUser, { external_id: 42 }, "external_id", "external_id: must be a string"],
    [CreateEndUser, { external_id: "" }, "external_id", "external_id: must not be empty"],
    [CreateEndUser, { external_id: "x".repeat(300) }, "external_id", "external_id: must be at most 255 characters long"],
    [CreateEndUser, { external_id: "a\u0000b" }, "external_id", "external_id: must not contain NUL characters or unpaired UTF-16 surrogates"],
    [CreatePlatform, { name: " padded " }, "name", "name: must not start or end with whitespace"],
    [UpdatePlatform, { settings: { display_rules: [] } }, "settings.display_rules", "settings.display_rules: is not an allowed field"],
    [ListEndUsersParams, { limit: "many" }, "limit", "limit: must be a number"],
    [ListEndUsersParams, { limit: "1000" }, "limit", "limit: must be between 1 and 100"]
  ] as const)("%#: %j -> %s", (schema, value, param, message) => {
    const validation = validationOf(schema as Schema.Schema<unknown, unknown, never>, value)
    expect(validation).toEqual({ param, message })
    expect(validation.message).not.toMatch(SCHEMA_TEXT)
  })

  it("never echoes the value that was sent", () => {
    const sent = "ZZZ-the-value-the-client-sent-ZZZ"
    for (const body of [{ ...chat, model: [sent] }, { ...chat, messages: [{ role: sent }] }, { ...chat, temperature: sent }]) {
      expect(validationOf(ChatRequestBody, body).message).not.toContain(sent)
    }
  })

  it("keeps an annotation's message, the schema author's words for clients", () => {
    const Query = Schema.Struct({ q: Schema.String.pipe(Schema.filter((s) => s.trim() !== "", { message: () => "query must not be blank" })) })
    expect(validationOf(Query, { q: " " })).toEqual({ param: "q", message: "q: query must not be blank" })
  })
})
