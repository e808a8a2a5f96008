// The one outbound HTTP call of a capability run: node:http(s) with the SSRF guard (checked before
// and again at connect time), a Node-side timeout and a body size cap. It never fails: every
// outcome, including "no answer", is a value the settlement maps to a final state. Demo mode's
// in-process providers (`mock://` URLs) are answered here, before any network or SSRF check.
import { BigDecimal, Duration, Effect } from "effect"
import * as http from "node:http"
import * as https from "node:https"
import { checkUrl, guardedLookup } from "../lib/SsrfGuard.js"
import { demoAnswer, isDemoUrl } from "./DemoProviders.js"

/** Provider bodies above this are cut off and the run counts as unanswered. */
const MAX_BODY_BYTES = 10 * 1024 * 1024

export type CallOutcome =
  | {
    readonly _tag: "Answered"
    readonly status: number
    readonly body: unknown
    /** The provider's own price for this call (`x-cost-usd` header), when it sent a valid one. */
    readonly reportedCost: BigDecimal.BigDecimal | null
  }
  | {
    readonly _tag: "NoAnswer"
    readonly kind: "timeout" | "connection_error" | "url_refused" | "credential_missing"
    readonly message: string
  }

/** The provider's credential header for one call (from the catalog file and the environment). */
export interface Credential {
  readonly header: string
  /** The header value (`<scheme> <secret>` or the secret). */
  readonly value: string
  /** The secret itself: removed from whatever the provider answers, so no endpoint can return it. */
  readonly secret: string
}

export interface CallSpec {
  readonly url: string
  readonly method: string
  readonly input: Readonly<Record<string, unknown>> | null
  readonly runId: string
  readonly timeoutMs: number
  readonly allowPrivate: boolean
  /** Demo mode: `mock://` URLs are answered in-process; outside it (the default) they are refused. */
  readonly demo?: boolean | undefined
  readonly credential?: Credential | undefined
}

const COST = /^\d{1,12}(\.\d{1,18})?$/

const parseCost = (value: string | Array<string> | undefined): BigDecimal.BigDecimal | null => {
  const raw = Array.isArray(value) ? value[0] : value
  if (raw === undefined || !COST.test(raw.trim())) return null
  return BigDecimal.normalize(BigDecimal.unsafeFromString(raw.trim()))
}

const parseBody = (text: string, contentType: string | undefined): unknown => {
  if (text === "") return null
  if (contentType?.includes("json") || /^\s*[[{"]/.test(text)) {
    try {
      return JSON.parse(text)
    } catch {
      return text
    }
  }
  return text
}

/** The answer's text with every occurrence of the secret (raw or JSON-escaped) replaced. */
const scrub = (text: string, secret: string): string => {
  if (secret === "") return text
  const escaped = JSON.stringify(secret).slice(1, -1)
  const once = text.split(secret).join("[redacted]")
  return escaped === secret ? once : once.split(escaped).join("[redacted]")
}

/** Methods without a body carry the input's top-level fields as query parameters. */
const hasBody = (method: string) => method !== "GET" && method !== "DELETE" && method !== "HEAD"

const withQuery = (url: URL, input: Readonly<Record<string, unknown>> | null): URL => {
  const out = new URL(url)
  for (const [k, v] of Object.entries(input ?? {})) {
    if (v === undefined || v === null) continue
    out.searchParams.set(k, typeof v === "string" ? v : JSON.stringify(v))
  }
  return out
}

/** The outcome and how long it took (milliseconds, from the Clock). */
export const callProvider = (spec: CallSpec): Effect.Effect<readonly [CallOutcome, number]> =>
  Effect.timed(send(spec)).pipe(Effect.map(([elapsed, outcome]) => [outcome, Math.round(Duration.toMillis(elapsed))] as const))

const send = (spec: CallSpec): Effect.Effect<CallOutcome> =>
  Effect.gen(function*() {
    if (isDemoUrl(spec.url)) return inProcess(spec)
    const checked = yield* Effect.either(checkUrl(spec.url, spec.allowPrivate))
    if (checked._tag === "Left") {
      return { _tag: "NoAnswer", kind: "url_refused", message: checked.left.message } as const
    }
    const method = spec.method.toUpperCase()
    const url = hasBody(method) ? checked.right : withQuery(checked.right, spec.input)
    const payload = hasBody(method) ? JSON.stringify(spec.input ?? {}) : undefined
    return yield* Effect.async<CallOutcome>((resume) => {
      const headers: Record<string, string> = {
        accept: "application/json",
        "user-agent": "model-gateway-capabilities/1",
        // Lets a provider de-duplicate a retried call.
        "x-gateway-run-id": spec.runId
      }
      if (payload !== undefined) {
        headers["content-type"] = "application/json"
        headers["content-length"] = String(Buffer.byteLength(payload))
      }
      if (spec.credential !== undefined) headers[spec.credential.header.toLowerCase()] = spec.credential.value
      const options: http.RequestOptions = { method, headers }
      if (!spec.allowPrivate) options.lookup = guardedLookup
      let settled = false
      const finish = (outcome: CallOutcome) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        resume(Effect.succeed(outcome))
      }
      const noAnswer = (kind: "timeout" | "connection_error", message: string) =>
        finish({ _tag: "NoAnswer", kind, message })
      const request = (url.protocol === "https:" ? https : http).request(url, options, (response) => {
        const chunks: Array<Buffer> = []
        let size = 0
        response.on("data", (chunk: Buffer) => {
          size += chunk.length
          if (size > MAX_BODY_BYTES) {
            request.destroy()
            noAnswer("connection_error", `provider response exceeds ${MAX_BODY_BYTES} bytes`)
            return
          }
          chunks.push(chunk)
        })
        response.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8")
          finish({
            _tag: "Answered",
            status: response.statusCode ?? 0,
            body: parseBody(spec.credential === undefined ? text : scrub(text, spec.credential.secret), response.headers["content-type"]),
            reportedCost: parseCost(response.headers["x-cost-usd"])
          })
        })
        response.on("error", (error) => noAnswer("connection_error", error.message))
      })
      // The timer lives in Node, not in the fiber, so the call ends on time even if the fiber is busy.
      const timer = setTimeout(() => {
        noAnswer("timeout", `provider did not answer within ${spec.timeoutMs} ms`)
        request.destroy()
      }, spec.timeoutMs)
      request.on("error", (error: NodeJS.ErrnoException) =>
        error.code === "ESSRF" ? finish({ _tag: "NoAnswer", kind: "url_refused", message: error.message }) : noAnswer("connection_error", error.message))
      request.end(payload)
      return Effect.sync(() => {
        clearTimeout(timer)
        request.destroy()
      })
    })
  })

/** A `mock://` provider: answered by DemoProviders in demo mode, refused otherwise (no network either way). */
const inProcess = (spec: CallSpec): CallOutcome => {
  if (spec.demo !== true) {
    return { _tag: "NoAnswer", kind: "url_refused", message: "in-process (mock://) providers answer only in demo mode (GATEWAY_DEMO)" }
  }
  const answer = demoAnswer(spec.url, spec.input)
  return answer === undefined
    ? { _tag: "NoAnswer", kind: "url_refused", message: "no in-process provider answers this mock:// URL" }
    : { _tag: "Answered", status: answer.status, body: answer.body, reportedCost: answer.reportedCost }
}
