// Shared HTTP plumbing for the upstream adapters: a JSON POST dispatched straight to undici's
// connection pool (no WHATWG Request/Response or web streams as with `fetch`, no Readable as with
// `request`), cancelled by Effect interruption, the timeout, the size limits on what an answer may
// make us hold (Limits.ts), and the error classification (connect / timeout / status / protocol)
// the router's failover relies on.
import { Effect, Either, Option, ParseResult, Schema } from "effect"
import { Agent, type Dispatcher } from "undici"
import { checkedDecoder } from "../../lib/WireCheck.js"
import { defaultUpstreamLimits, ERROR_BODY_PREFIX_BYTES } from "./Limits.js"
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

/** `message` is the gateway's own wording; what the provider sent goes in `detail` (see UpstreamError). */
export const protocolError = (message: string, detail?: string) =>
  new UpstreamError({ kind: "protocol", message: `upstream protocol error: ${message}`, retryable: false, detail })

/**
 * 429 and 5xx (Anthropic's 529 overloaded included) are worth another candidate; other 4xx are
 * the request's fault. The body (a prefix of it) is the provider's: detail only.
 */
export const statusError = (status: number, bodyText: string) =>
  new UpstreamError({
    kind: "status",
    status,
    message: `upstream answered ${status}`,
    retryable: status === 429 || status >= 500,
    detail: errorMessageOf(bodyText)
  })

/**
 * An answer past GATEWAY_UPSTREAM_MAX_BODY: the exchange was aborted at the limit. Retryable,
 * as a broken connection is: another candidate may answer sanely.
 */
export const tooLargeError = (maxBodyBytes: number) =>
  new UpstreamError({
    kind: "protocol",
    message: `upstream answer exceeds ${maxBodyBytes} bytes (GATEWAY_UPSTREAM_MAX_BODY); the exchange was aborted`,
    retryable: true
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
  return bodyText.length === 0 ? "(empty body)" : bodyText
}

/**
 * The upstreams' connection pool (keep-alive, undici's default timeouts), this package's undici
 * and not the process's global dispatcher: once anything calls the global `fetch`, that is
 * Node's bundled undici, whose dispatch takes only the older handler interface.
 */
const upstreamPool = new Agent()

/** The text without its leading byte order mark, if it has one (bodies are UTF-8; the mark is not content). */
export const withoutBom = (text: string): string => (text.charCodeAt(0) === 0xfeff ? text.slice(1) : text)

/** How much of a body may wait for its reader before the socket's reads stop (as in undici's Readable bodies). */
const HIGH_WATER_MARK = 64 * 1024

/** The reason an exchange is cancelled with; made once (nobody reads its stack). */
const ABORTED = new Error("upstream exchange cancelled")

/**
 * One upstream exchange as undici's dispatch handler: the answer's status, then its body as the
 * chunks that arrived, kept until taken. undici's `request` wraps every answer in a Node
 * Readable and a promise, and `body.text()` in a consumer of its own, on every call (hot-path
 * rule "plain code at the I/O edges", docs/performance.md). `wake` hears of every event.
 *
 * What waits untaken never exceeds `limit` (a 2xx body read whole: the answer limit; a non-2xx
 * body: the prefix kept for the log): past it the exchange is cut off, at once and for good.
 */
class Exchange implements Dispatcher.DispatchHandler {
  constructor(private limit: number) {}
  /** Set once the request is on a connection; an abort before that waits for it. */
  private controller: Dispatcher.DispatchController | undefined = undefined
  private abortPending = false
  /**
   * The body is read as it arrives (a stream): a reader that falls behind pauses the socket's
   * reads, as a Readable's high-water mark would. A body read whole is never paused.
   */
  paced = false
  /** The reader is done: the rest of the body is dropped as it arrives. */
  private discarding = false
  private parts: Array<Buffer> = []
  private buffered = 0
  /**
   * The body went past its limit: the request was aborted and the body ends here (a 2xx body's
   * parts were dropped, it is of no use; a non-2xx body keeps its prefix).
   */
  cut = false
  /** The final status; 0 until it arrives (1xx answers are passed over). */
  status = 0
  ended = false
  failure: Error | undefined = undefined
  wake: (() => void) | undefined = undefined

  onRequestStart(controller: Dispatcher.DispatchController) {
    this.controller = controller
    if (this.abortPending) controller.abort(ABORTED)
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number) {
    if (statusCode < 200) return
    this.status = statusCode
    if (statusCode >= 300) this.limit = ERROR_BODY_PREFIX_BYTES
    this.wake?.()
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer) {
    if (this.discarding) return
    this.parts.push(chunk)
    this.buffered += chunk.length
    if (this.buffered > this.limit) return this.cutOff(controller)
    if (this.paced && this.buffered >= HIGH_WATER_MARK) controller.pause()
    this.wake?.()
  }

  /** Stops reading a body past its limit: nothing more is kept, and the socket is aborted. */
  private cutOff(controller: Dispatcher.DispatchController) {
    this.cut = true
    this.discarding = true
    if (this.status < 300) {
      this.parts = []
      this.buffered = 0
    }
    this.wake?.()
    controller.abort(ABORTED)
  }

  onResponseEnd() {
    this.ended = true
    this.wake?.()
  }

  onResponseError(_controller: Dispatcher.DispatchController | undefined, error: Error) {
    this.failure = error
    this.wake?.()
  }

  /** The chunks that arrived since the last take (perhaps none); a paused socket reads again. */
  take(): Array<Buffer> {
    const parts = this.parts
    if (parts.length === 0) return parts
    this.parts = []
    this.buffered = 0
    this.controller?.resume()
    return parts
  }

  /** The whole body as text, once it ended (a byte order mark dropped, as `body.text()` did). */
  text(): string {
    return withoutBom(Buffer.concat(this.take()).toString("utf8"))
  }

  /** Drops the rest of the body as it arrives: the connection goes back to the pool at its end. */
  discard() {
    this.discarding = true
    this.take()
  }

  /** Cancels the exchange unless it is over. */
  abort() {
    if (this.ended || this.failure !== undefined) return
    if (this.controller === undefined) this.abortPending = true
    else this.controller.abort(ABORTED)
  }
}

/**
 * One exchange within `timeoutMs`: the request, the status check (a non-2xx answer's body read
 * for its message), then on a 2xx status `ready`, which gives the outcome once the exchange has
 * what the caller needs (the whole body; a stream's source at once), or undefined to wait for
 * more. Plain callbacks under a single Effect.async, not an Effect per step (a timeout race, a
 * tap, a second async for the body, an ensuring), each of which runs on every call (hot-path rule
 * "plain code at the I/O edges"). A plain timer ends the exchange with the timeout; interruption
 * cancels it too.
 */
const exchange = <A>(req: PostRequest, maxBodyBytes: number, ready: (exchange: Exchange) => A | undefined) =>
  Effect.async<A, UpstreamError>((resume) => {
    const ex = new Exchange(maxBodyBytes)
    let over = false
    const finish = (outcome: Effect.Effect<A, UpstreamError>) => {
      if (over) return
      over = true
      clearTimeout(timer)
      ex.wake = undefined
      resume(outcome)
    }
    const timer = setTimeout(() => {
      finish(Effect.fail(timeoutError(req.timeoutMs)))
      ex.abort()
    }, req.timeoutMs)
    ex.wake = () => {
      if (ex.status >= 200 && ex.status < 300) {
        const value = ready(ex)
        if (value !== undefined) finish(Effect.succeed(value))
        else if (ex.cut) finish(Effect.fail(tooLargeError(maxBodyBytes)))
        else if (ex.failure !== undefined) finish(Effect.fail(connectError(ex.failure, "response body")))
      } else if (ex.status !== 0) {
        if (ex.ended || ex.cut) finish(Effect.fail(statusError(ex.status, ex.text())))
        else if (ex.failure !== undefined) finish(Effect.fail(statusError(ex.status, "")))
      } else if (ex.failure !== undefined) {
        finish(Effect.fail(connectError(ex.failure, "request")))
      }
    }
    let url: URL
    try {
      url = new URL(req.url)
    } catch (error) {
      finish(Effect.fail(connectError(error, "request")))
      return
    }
    upstreamPool.dispatch({
      origin: url.origin,
      path: url.pathname + url.search,
      method: "POST",
      headers: { "content-type": "application/json", ...req.headers },
      body: JSON.stringify(req.body)
    }, ex)
    return Effect.sync(() => {
      over = true
      clearTimeout(timer)
      ex.abort()
    })
  })

/** Non-streaming call: status check and the whole body (at most `maxBodyBytes`), all within `timeoutMs`. */
export const postJson = (req: PostRequest, maxBodyBytes = defaultUpstreamLimits.maxBodyBytes): Effect.Effect<string, UpstreamError> =>
  exchange(req, maxBodyBytes, (ex) => (ex.ended ? ex.text() : undefined))

/**
 * A streaming exchange's body, read a batch at a time (everything that arrived since the last
 * read) by the one stage that parses and translates it (Sse.ts): the exchange's chunks read
 * directly cost less than an Effect Stream stage of its own.
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
 * Streaming call: succeeds once a 2xx status arrived within `timeoutMs` (so the router can still
 * fail over), with the body to read. Callers must close what they get. A streamed body is read
 * as it arrives (paced), so it never waits whole: its limits are the parser's (Sse.ts).
 */
export const postStream = (req: PostRequest): Effect.Effect<ByteSource, UpstreamError> =>
  exchange(req, defaultUpstreamLimits.maxBodyBytes, byteSource)

const byteSource = (ex: Exchange): ByteSource => {
  ex.paced = true
  const read = Effect.async<Option.Option<ReadonlyArray<Uint8Array>>, UpstreamError>((resume) => {
    const settled = (): boolean => {
      const parts = ex.take()
      if (parts.length > 0) resume(Effect.succeed(Option.some(parts)))
      else if (ex.failure !== undefined) resume(Effect.fail(connectError(ex.failure, "stream")))
      else if (ex.ended) resume(Effect.succeed(Option.none()))
      else return false
      ex.wake = undefined
      return true
    }
    if (settled()) return
    ex.wake = settled
    // A read is interrupted only when the stream is being abandoned (the client left, or before
    // the stream was handed out): the exchange goes with it.
    return Effect.sync(() => {
      ex.wake = undefined
      ex.abort()
    })
  })
  // Every stream stops at the provider's terminator, just before its body's end: the rest is
  // dropped as it arrives rather than aborted (an abort costs the connection). undici's body
  // timeout bounds a provider that never ends its body after the terminator.
  const close = (complete: boolean) =>
    Effect.sync(() => {
      if (ex.ended) return
      if (complete) ex.discard()
      else ex.abort()
    })
  return { read, close }
}

/**
 * Decodes a JSON text with a wire schema; any mismatch is a (non-retryable) protocol error. A
 * well-formed value is accepted by the schema's compiled check (layers/lib/WireCheck.ts); Schema
 * decodes the rest (and reports what is wrong).
 */
export const jsonDecoder = <A, I>(schema: Schema.Schema<A, I, never>, what: string) => {
  const decodeValue = checkedDecoder(schema)
  const decodeText = Schema.decodeUnknownEither(Schema.parseJson(schema))
  return (text: string): Either.Either<A, UpstreamError> => {
    const value = parsed(text)
    // Not JSON: Schema's parseJson says why.
    const decoded = value === NOT_JSON ? decodeText(text) : decodeValue(value)
    // The formatted issue echoes what the provider sent: detail only (UpstreamError).
    return Either.mapLeft(decoded, (e) =>
      protocolError(`unexpected ${what}`, ParseResult.TreeFormatter.formatErrorSync(e).slice(0, MAX_DECODE_DETAIL)))
  }
}

/** How much of a formatted decode issue is kept for the log. */
const MAX_DECODE_DETAIL = 4_000

const NOT_JSON = Symbol("not JSON")

/** The JSON value of a text, or NOT_JSON (Schema then says why). */
const parsed = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return NOT_JSON
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
