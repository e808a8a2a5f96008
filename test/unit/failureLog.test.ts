// Redaction of a provider's text before it is logged (layers/pipeline/upstream/FailureLog.ts): the call's
// provider key wherever it appears (even cut off at the end of a body prefix), and credential
// shapes whoever wrote them; and the failure log line itself, written outside any span.
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, FiberRef, FiberRefs, Logger, Option, Tracer } from "effect"
import { loggedDetail, logUpstreamFailure, redactSecrets } from "../../layers/pipeline/upstream/FailureLog.js"
import { UpstreamError } from "../../layers/pipeline/upstream/Upstream.js"

const KEY = "tenant-provider-key-8f3a9c0d1e2b"

describe("redactSecrets", () => {
  it("removes the call's key wherever it appears, and a start of it cut off at the end", () => {
    expect(redactSecrets(`bad key ${KEY} (you sent ${KEY})`, [KEY])).toBe("bad key [redacted] (you sent [redacted])")
    expect(redactSecrets(`prefix ends mid-key ${KEY.slice(0, 9)}`, [KEY])).toBe("prefix ends mid-key [redacted]")
    // A secret too short to search for verbatim is left to the patterns.
    expect(redactSecrets("the k in skip", ["k"])).toBe("the k in skip")
  })

  it("removes credential shapes: bearer tokens, sk- keys, values of credential fields and headers", () => {
    const text = [
      "authorization: Bearer abc.def-ghi",
      "x-api-key: anthropic-raw-key-123",
      `{"api_key":"json-key-value","password": "hunter22"}`,
      "key sk-proj-AbCdEf0123456789 and sk-ant-api03-xyzxyzxyz and sk-eu_0123456789abcdef",
      "access_token=tok123&refresh_token=ref456"
    ].join("\n")
    const out = redactSecrets(text, [])
    for (const secret of ["abc.def-ghi", "anthropic-raw-key-123", "json-key-value", "hunter22", "sk-proj-AbCdEf0123456789", "sk-ant-api03", "sk-eu_0123", "tok123", "ref456"]) {
      expect(out).not.toContain(secret)
    }
    expect(out).toContain("authorization: Bearer [redacted]")
    expect(out).toContain("x-api-key: [redacted]")
  })

  it("leaves ordinary provider messages readable", () => {
    const message = "The model `gpt-5` does not exist or you do not have access to it."
    expect(redactSecrets(message, [KEY])).toBe(message)
  })

  it("redacts before cutting: a long detail never ends in half a secret", () => {
    const detail = `${"x".repeat(1_995)}${KEY}`
    const logged = loggedDetail(detail, [KEY])
    expect(logged).not.toContain(KEY.slice(0, 5))
    expect(logged.length).toBeLessThanOrEqual(2_003)
  })
})

describe("logUpstreamFailure", () => {
  it.effect("logs the redacted detail and the failure's fields, with no current span", () =>
    Effect.gen(function*() {
      const seen: Array<{ message: unknown; annotations: Record<string, unknown>; span: boolean }> = []
      const capture = Logger.make(({ annotations, context, message }) => {
        const span = Option.isSome(Context.getOption(FiberRefs.getOrDefault(context, FiberRef.currentContext), Tracer.ParentSpan))
        seen.push({ message, annotations: Object.fromEntries(annotations), span })
      })
      const error = new UpstreamError({ kind: "status", status: 401, message: "upstream answered 401", retryable: false, detail: `invalid key: Bearer ${KEY}` })
      yield* logUpstreamFailure(error, { provider: "acme", model: "m-1", apiKey: KEY }).pipe(
        Effect.withSpan("outer"),
        Effect.provide(Logger.replace(Logger.defaultLogger, capture))
      )
      expect(seen).toHaveLength(1)
      expect(seen[0]!.message).toEqual(["upstream attempt failed"])
      expect(seen[0]!.annotations).toMatchObject({
        "upstream.provider": "acme",
        "upstream.model": "m-1",
        "upstream.status": 401,
        "upstream.error": "upstream answered 401",
        "upstream.detail": "invalid key: Bearer [redacted]"
      })
      expect(JSON.stringify(seen)).not.toContain(KEY)
      expect(seen[0]!.span).toBe(false)
    }))

  it.effect("adds no event to the span it runs under (the tracer's logger copies annotations into events)", () =>
    Effect.gen(function*() {
      const error = new UpstreamError({ kind: "status", status: 500, message: "upstream answered 500", retryable: true, detail: "provider text" })
      const span = yield* Effect.gen(function*() {
        yield* logUpstreamFailure(error, { model: "m", apiKey: KEY })
        return yield* Effect.currentSpan
      }).pipe(Effect.withSpan("outer"))
      const events: ReadonlyArray<unknown> = (span as Tracer.Span & { events?: ReadonlyArray<unknown> }).events ?? []
      expect(events).toEqual([])
    }))
})
