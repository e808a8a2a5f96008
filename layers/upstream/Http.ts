// Shared HTTP plumbing for the upstream adapters: a JSON POST over undici's `request` (a fifth of
// the CPU of `fetch` per call: no WHATWG Request/Response or web streams) with a cancel signal
// tied to Effect interruption, the timeout, and the error classification (connect / timeout /
// status / protocol) the router's failover relies on.
import { Effect, Either, Option, ParseResult, Schema } from "effect"
import { EventEmitter } from "node:events"
import { request } from "undici"
import { compiledCheck } from "../../src/lib/WireCheck.js"
import { UpstreamError } from "./Upstream.js"

export interface PostRequest {
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: unknown
  readonly timeoutMs: number
}

const timeoutError = (timeoutMs: number) =>
  new UpstreamError({ kind: "timeout", message: `upstream did not answer within ${timeoutMs} ms`, retryable: true })

// Socket and DNS failures carry a code (ECONNREFUSED, UND_ERR_SOCKET, ...), on the error itself
// or, when wrapped, on its cause.
const codeOf = (error: unknown): string | undefined =>
  typeof error === "object" && error !== null && "code" in error && typeof error.code === "string" ? error.code : undefined
const describeCause = (error: unknown): string => {
  const code = codeOf(error) ?? codeOf(error instanceof Error ? error.cause : undefined)
  const message = error instanceof Error ? error.message : String(error)
  return code === undefined ? message : `${code} (${message})`
}

export const connectError = (error: unknown, during: string) =>
  new UpstreamError({ kind: "connect", message: `upstream ${during} failed: ${describeCause(error)}`, retryable: true })

export const protocolError = (message: string) =>
  new UpstreamError({ kind: "protocol", message: `upstream protocol error: ${message}`, retryable: false })

/** 429 and 5xx (Anthropic's 529 overloaded included) are worth another candidate; other 4xx are the request's fault. */
export const statusError = (status: number, bodyText: string) =>
  new UpstreamError({
    kind: "status",
    status,
    message: `upstream answered ${status}: ${errorMessageOf(bodyText)}`,
    retryable: status === 429 || status >= 500
  })

// OpenAI, Anthropic and Responses all put the human message at error.message.
const errorMessageOf = (bodyText: string): string => {
  try {
    const parsed: unknown = JSON.parse(bodyText)
    if (typeof parsed === "object" && parsed !== null && "error" in parsed) {
      const error: unknown = parsed.error
      if (typeof error === "string") return error
      if (typeof error === "object" && error !== null && "message" in error && typeof error.message === "string") {
        return error.message
      }
    }
  } catch {
    // not JSON: fall through to the raw text
  }
  return bodyText.length === 0 ? "(empty body)" : bodyText.slice(0, 500)
}

type Response = Awaited<ReturnType<typeof request>>

/**
 * What cancels an exchange. undici takes an EventEmitter as the signal (`abort` event, `aborted`
 * flag): an AbortController builds an EventTarget and an AbortSignal, about 10 us of CPU per call
 * here, and made every call pay for the rare cancellation.
 */
class Cancel extends EventEmitter {
  aborted = false
  /** Cancels the exchange; the abort error undici builds is made with stack capture off (nobody reads it). */
  abort() {
    if (this.aborted) return
    this.aborted = true
    const limit = Error.stackTraceLimit
    Error.stackTraceLimit = 0
    try {
      this.emit("abort")
    } finally {
      Error.stackTraceLimit = limit
    }
  }
}

/**
 * One exchange within `timeoutMs`: the request, the status check (a non-2xx answer's body read
 * for its message), then `finish` on a 2xx response. It runs as plain promises under a single
 * Effect.async: as Effects (a timeout race, a tap, a second async for the body, an ensuring)
 * its steps were about 40 runtime operations per call. A plain timer aborts the exchange, and
 * the failure that abort causes is reported as the timeout; interruption aborts it too.
 */
const exchange = <A>(req: PostRequest, cancel: Cancel, finish: (response: Response) => Promise<A>) =>
  Effect.async<A, UpstreamError>((resume) => {
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      cancel.abort()
    }, req.timeoutMs)
    const settle = (outcome: Either.Either<A, UpstreamError>) => {
      clearTimeout(timer)
      resume(Either.isRight(outcome) ? Effect.succeed(outcome.right) : Effect.fail(timedOut ? timeoutError(req.timeoutMs) : outcome.left))
    }
    request(req.url, {
      method: "POST",
      headers: { "content-type": "application/json", ...req.headers },
      body: JSON.stringify(req.body),
      signal: cancel
    }).then(
      (response) =>
        response.statusCode >= 200 && response.statusCode < 300
          ? finish(response).then(
            (a) => settle(Either.right(a)),
            (e) => settle(Either.left(connectError(e, "response body")))
          )
          : response.body.text().catch(() => "").then((text) => settle(Either.left(statusError(response.statusCode, text)))),
      (e) => settle(Either.left(connectError(e, "request")))
    )
    return Effect.sync(() => {
      clearTimeout(timer)
      cancel.abort()
    })
  })

/** Non-streaming call: status check and the whole body, all within `timeoutMs`. */
export const postJson = (req: PostRequest): Effect.Effect<string, UpstreamError> =>
  Effect.suspend(() => exchange(req, new Cancel(), (response) => response.body.text()))

/**
 * A streaming exchange's body, read a batch at a time (everything that arrived since the last
 * read) by the one stage that parses and translates it (Sse.ts): a Node readable read directly
 * costs less than an Effect Stream stage of its own.
 */
export interface ByteSource {
  /** What arrived since the last read (waiting for something); None once the body has ended. */
  readonly read: Effect.Effect<Option.Option<ReadonlyArray<Uint8Array>>, UpstreamError>
  /**
   * Ends the exchange. `complete`: the reader got all it wanted (the provider's terminator), so
   * what remains of the body is read and dropped, and the connection goes back to the pool;
   * otherwise the request is aborted unless its body was read to the end.
   */
  readonly close: (complete: boolean) => Effect.Effect<void>
}

/**
 * Streaming call: succeeds once a 2xx status and headers arrived within `timeoutMs` (so the
 * router can still fail over), with the body to read. Callers must close what they get.
 */
export const postStream = (req: PostRequest): Effect.Effect<ByteSource, UpstreamError> =>
  Effect.suspend(() => {
    const cancel = new Cancel()
    return exchange(req, cancel, (response) => Promise.resolve(byteSource(response, cancel)))
  })

const byteSource = (response: Response, cancel: Cancel): ByteSource => {
  const body = response.body
  // Listened to for the body's whole life: an error between two reads would otherwise be thrown.
  let failure: unknown = undefined
  body.on("error", (error) => (failure ??= error))
  const takeAll = (): Array<Uint8Array> => {
    const parts: Array<Uint8Array> = []
    for (let part = body.read(); part !== null; part = body.read()) parts.push(part)
    return parts
  }
  const read = Effect.async<Option.Option<ReadonlyArray<Uint8Array>>, UpstreamError>((resume) => {
    const settled = (): boolean => {
      const parts = takeAll()
      if (parts.length > 0) resume(Effect.succeed(Option.some(parts)))
      else if (failure !== undefined) resume(Effect.fail(connectError(failure, "stream")))
      else if (body.readableEnded) resume(Effect.succeed(Option.none()))
      else return false
      return true
    }
    if (settled()) return
    const check = () => {
      if (settled()) stop()
    }
    const stop = () => {
      body.off("readable", check)
      body.off("end", check)
      body.off("error", check)
    }
    body.on("readable", check)
    body.on("end", check)
    body.on("error", check)
    return Effect.sync(stop)
  })
  // Every stream stops at the provider's terminator, just before its body's end: the rest is
  // drained rather than aborted (an abort cost about 4% of a stream's CPU: the abort errors, the
  // signal's event, the body destroyed with an error). undici's body timeout bounds a provider
  // that never ends its body after the terminator.
  const close = (complete: boolean) =>
    Effect.sync(() => {
      if (body.readableEnded) return
      if (complete) body.resume()
      else cancel.abort()
    })
  return { read, close }
}

/**
 * Decodes a JSON text with a wire schema; any mismatch is a (non-retryable) protocol error. A
 * well-formed text is accepted by the schema's compiled check (src/lib/WireCheck.ts); Schema
 * decodes the rest (and reports what is wrong).
 */
export const jsonDecoder = <A, I>(schema: Schema.Schema<A, I, never>, what: string) => {
  const decode = Schema.decodeUnknownEither(Schema.parseJson(schema))
  const check = compiledCheck(schema)
  return (text: string): Either.Either<A, UpstreamError> => {
    if (check !== undefined) {
      const value = parsed(text)
      if (check(value)) return Either.right(value)
    }
    return Either.mapLeft(decode(text), (e) =>
      protocolError(`unexpected ${what}: ${ParseResult.TreeFormatter.formatErrorSync(e).slice(0, 300)}`))
  }
}

/** The JSON value of a text, or undefined when it is not JSON (Schema then says why). */
const parsed = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

// Propagated headers never carry credentials or framing: those are the adapter's alone.
const reserved = new Set(["authorization", "x-api-key", "content-type", "content-length", "host", "connection"])

/** Extra headers (e.g. traceparent) lower-cased, minus reserved ones, then the adapter's own. */
export const mergeHeaders = (
  extra: Readonly<Record<string, string>> | undefined,
  own: Readonly<Record<string, string>>
): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const [name, value] of Object.entries(extra ?? {})) {
    const key = name.toLowerCase()
    if (!reserved.has(key)) out[key] = value
  }
  return { ...out, ...own }
}

/** Strips a trailing slash so `${baseUrl}/path` never doubles it. */
export const joinUrl = (baseUrl: string, path: string) => `${baseUrl.replace(/\/+$/, "")}${path}`
