// Shared plumbing for the tool apps: the provider call (bearer auth, JSON, AppApiError mapping, a
// cap on what an answer may make us hold), tool definitions whose arguments are checked against
// their own JSON schema, and readers that cut a provider's JSON answer down to the compact subset
// a model needs.
import { Data, Duration, Effect } from "effect"
import { AppApiError, type ToolContext, type ToolDefinition, type ToolResult } from "./ToolApp.js"

// ---- provider calls ---------------------------------------------------------------------------

export type HttpMethod = "GET" | "POST" | "PUT" | "PATCH" | "DELETE"

/** Repeated keys (Gmail's metadataHeaders) are arrays; undefined values are left out. */
export type QueryValue = string | number | boolean | ReadonlyArray<string> | undefined

export interface ApiCall {
  readonly method: HttpMethod
  /** Relative to `ctx.apiUrl`, already percent-encoded (see `segment`). */
  readonly path: string
  readonly query?: Readonly<Record<string, QueryValue>>
  /** Sent as JSON when present. */
  readonly body?: unknown
  /** Provider headers (GitHub's Accept and API version); they override the defaults. */
  readonly headers?: Readonly<Record<string, string>>
}

const timeoutMs = 30_000

/** An app API answer past this is refused (and its connection dropped) rather than held whole. */
export const MAX_APP_ANSWER_BYTES = 10 * 1024 * 1024
/** Of an error answer only this much is read: its message is near the start. */
const ERROR_PREFIX_BYTES = 64 * 1024

/** A body read up to `maxBytes`; `cut` when there was more (the rest is not read: the stream is cancelled). */
const readCapped = async (response: Response, maxBytes: number): Promise<{ readonly text: string; readonly cut: boolean }> => {
  const reader = response.body?.getReader()
  if (reader === undefined) return { text: "", cut: false }
  const parts: Array<Uint8Array> = []
  let size = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) return { text: Buffer.concat(parts).toString("utf8"), cut: false }
    if (size + value.byteLength > maxBytes) {
      parts.push(value.subarray(0, maxBytes - size))
      await reader.cancel().catch(() => undefined)
      return { text: Buffer.concat(parts).toString("utf8"), cut: true }
    }
    parts.push(value)
    size += value.byteLength
  }
}

/** Strips a trailing slash so `${apiUrl}${path}` never doubles it. */
export const buildUrl = (apiUrl: string, path: string, query: ApiCall["query"]): string => {
  const params = new URLSearchParams()
  for (const [key, value] of Object.entries(query ?? {})) {
    if (value === undefined) continue
    if (typeof value === "object") for (const item of value) params.append(key, item)
    else params.append(key, String(value))
  }
  const search = params.toString()
  return `${apiUrl.replace(/\/+$/, "")}${path}${search === "" ? "" : `?${search}`}`
}

/** One path segment, percent-encoded (owner names, ids, channel names never break the path). */
export const segment = (value: string | number): string => encodeURIComponent(String(value))

// undici wraps socket/DNS failures as TypeError("fetch failed", { cause: { code } }).
const describeNetworkError = (error: unknown): string => {
  const cause = error instanceof Error ? error.cause : undefined
  const code = typeof cause === "object" && cause !== null && "code" in cause ? String(cause.code) : undefined
  const message = error instanceof Error ? error.message : String(error)
  return code === undefined ? message : `${code} (${message})`
}

const networkError = (error: unknown) =>
  new AppApiError({ status: null, message: `provider unreachable: ${describeNetworkError(error)}`, reauth: false })

/**
 * The human message of a provider error body: GitHub `{message}`, Google `{error:{message}}`,
 * Zendesk `{error, description}` or `{error:{title,message}}`, OAuth `{error, error_description}`.
 */
export const providerMessage = (bodyText: string): string => {
  const body = parseJson(bodyText)
  const candidates = [
    get(body, "error.message"),
    get(body, "message"),
    joinDefined(get(body, "error"), get(body, "description") ?? get(body, "error_description")),
    get(body, "error.title")
  ]
  const found = candidates.find((c): c is string => typeof c === "string" && c !== "")
  if (found !== undefined) return [found, ...validationDetails(body)].join("; ")
  return bodyText.length === 0 ? "(empty body)" : bodyText.slice(0, 300)
}

// Zendesk explains a 422 in `details: {field: [{description}]}`; the model needs that sentence.
const validationDetails = (body: unknown): ReadonlyArray<string> => {
  const details = get(body, "details")
  if (typeof details !== "object" || details === null) return []
  return Object.values(details).flatMap((list) =>
    asArray(list).map((d) => get(d, "description")).filter((d): d is string => typeof d === "string")
  )
}

const joinDefined = (first: unknown, second: unknown): string | undefined =>
  typeof first !== "string" ? undefined : typeof second === "string" && second !== "" ? `${first}: ${second}` : first

const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/** 401 means the grant is gone (revoked, or expired beyond refresh): the connection needs re-auth. */
export const statusError = (status: number, bodyText: string) =>
  new AppApiError({
    status,
    message: `provider answered ${status}: ${providerMessage(bodyText)}`,
    reauth: status === 401
  })

const requestHeaders = (ctx: ToolContext, call: ApiCall): Record<string, string> => ({
  accept: "application/json",
  authorization: `Bearer ${ctx.accessToken}`,
  ...(call.body === undefined ? {} : { "content-type": "application/json; charset=utf-8" }),
  ...call.headers
})

/** Calls the provider as the end user; the parsed JSON answer (null for an empty 2xx body). */
export const callApi = (ctx: ToolContext, call: ApiCall): Effect.Effect<unknown, AppApiError> =>
  Effect.tryPromise({
    try: (signal) =>
      fetch(buildUrl(ctx.apiUrl, call.path, call.query), {
        method: call.method,
        headers: requestHeaders(ctx, call),
        ...(call.body === undefined ? {} : { body: JSON.stringify(call.body) }),
        signal
      }).then(async (response) => {
        const { text, cut } = await readCapped(response, response.ok ? MAX_APP_ANSWER_BYTES : ERROR_PREFIX_BYTES)
        return { status: response.status, ok: response.ok, text, tooLarge: cut && response.ok }
      }),
    catch: networkError
  }).pipe(
    Effect.timeoutFail({
      duration: Duration.millis(timeoutMs),
      onTimeout: () => new AppApiError({ status: null, message: `provider did not answer within ${timeoutMs} ms`, reauth: false })
    }),
    Effect.flatMap(({ ok, status, text, tooLarge }) => {
      if (!ok) return Effect.fail(statusError(status, text))
      if (tooLarge) {
        return Effect.fail(new AppApiError({ status, message: `provider answer exceeds ${MAX_APP_ANSWER_BYTES} bytes`, reauth: false }))
      }
      if (text.trim() === "") return Effect.succeed(null)
      const body = parseJson(text)
      return body === undefined
        ? Effect.fail(new AppApiError({ status, message: "provider answered with a body that is not JSON", reauth: false }))
        : Effect.succeed(body)
    })
  )

// ---- tool definitions -------------------------------------------------------------------------

/** An app-level failure the model should see as an `isError` result (bad input, Slack `ok:false`). */
export class ToolFailure extends Data.TaggedError("ToolFailure")<{ readonly message: string }> {}

interface ParamBase {
  readonly description: string
  readonly required?: boolean
}
export interface StringParam extends ParamBase {
  readonly type: "string"
  readonly enum?: ReadonlyArray<string>
  readonly default?: string
}
export interface IntegerParam extends ParamBase {
  readonly type: "integer"
  readonly minimum?: number
  readonly maximum?: number
  readonly default?: number
}
export interface BooleanParam extends ParamBase {
  readonly type: "boolean"
  readonly default?: boolean
}
export interface StringListParam extends ParamBase {
  readonly type: "array"
}
export type Param = StringParam | IntegerParam | BooleanParam | StringListParam
export type Params = Readonly<Record<string, Param>>

type ValueOf<P extends Param> = P extends StringParam ? string
  : P extends IntegerParam ? number
  : P extends BooleanParam ? boolean
  : ReadonlyArray<string>

/** Required parameters and those with a default are always present after checking. */
export type ArgsOf<P extends Params> = {
  readonly [K in keyof P]: P[K] extends { readonly required: true } | { readonly default: unknown } ? ValueOf<P[K]>
    : ValueOf<P[K]> | undefined
}

export interface ToolSpec<P extends Params> {
  readonly name: string
  readonly description: string
  readonly params: P
  /** The compact answer; it becomes the result's single JSON text item. */
  readonly run: (ctx: ToolContext, args: ArgsOf<P>) => Effect.Effect<unknown, AppApiError | ToolFailure>
}

const schemaOf = (param: Param): Record<string, unknown> => {
  const { required: _required, ...schema } = param
  return param.type === "array" ? { ...schema, items: { type: "string" } } : schema
}

// Models often send numbers and booleans as strings and lists as "a, b": accept those spellings.
const coerce = (param: Param, value: unknown): { readonly ok: unknown } | undefined => {
  switch (param.type) {
    case "string":
      if (typeof value !== "string") return undefined
      return param.enum === undefined || param.enum.includes(value) ? { ok: value } : undefined
    case "integer": {
      const n = typeof value === "string" && /^-?\d+$/.test(value.trim()) ? Number(value) : value
      if (typeof n !== "number" || !Number.isInteger(n)) return undefined
      if (param.minimum !== undefined && n < param.minimum) return undefined
      return param.maximum !== undefined && n > param.maximum ? undefined : { ok: n }
    }
    case "boolean":
      if (typeof value === "boolean") return { ok: value }
      return value === "true" || value === "false" ? { ok: value === "true" } : undefined
    case "array":
      if (typeof value === "string") return { ok: value.split(",").map((s) => s.trim()).filter((s) => s !== "") }
      return Array.isArray(value) && value.every((v) => typeof v === "string") ? { ok: value } : undefined
  }
}

const expected = (param: Param): string => {
  switch (param.type) {
    case "string":
      return param.enum === undefined ? "a non-empty string" : `one of ${param.enum.join(", ")}`
    case "integer":
      return `an integer${param.minimum === undefined ? "" : ` >= ${param.minimum}`}${
        param.maximum === undefined ? "" : ` <= ${param.maximum}`
      }`
    case "boolean":
      return "true or false"
    case "array":
      return "an array of strings"
  }
}

const isBlank = (value: unknown) => value === undefined || value === null || (typeof value === "string" && value.trim() === "")

/** Checks the arguments against the tool's parameters; the first problem as a sentence. */
export const checkArgs = <P extends Params>(
  params: P,
  args: Readonly<Record<string, unknown>>
): { readonly args: ArgsOf<P> } | { readonly problem: string } => {
  const out: Record<string, unknown> = {}
  for (const [name, param] of Object.entries(params)) {
    const raw = args[name]
    if (isBlank(raw)) {
      if (param.required === true) return { problem: `Missing required argument "${name}" (${expected(param)}).` }
      if ("default" in param && param.default !== undefined) out[name] = param.default
      continue
    }
    const value = coerce(param, raw)
    if (value === undefined) return { problem: `Argument "${name}" must be ${expected(param)}.` }
    out[name] = value.ok
  }
  // Every key of P was visited above with a value of its declared type (or left undefined).
  return { args: out as ArgsOf<P> }
}

export const textResult = (value: unknown): ToolResult => ({
  content: [{ type: "text", text: JSON.stringify(value) }]
})

export const errorResult = (message: string): ToolResult => ({
  content: [{ type: "text", text: message }],
  isError: true
})

/** A ToolDefinition from a parameter table: schema, argument checks and result wrapping in one place. */
export const defineTool = <const P extends Params>(spec: ToolSpec<P>): ToolDefinition => {
  const required = Object.entries(spec.params).filter(([, p]) => p.required === true).map(([name]) => name)
  return {
    name: spec.name,
    description: spec.description,
    inputSchema: {
      type: "object",
      properties: Object.fromEntries(Object.entries(spec.params).map(([name, p]) => [name, schemaOf(p)])),
      ...(required.length === 0 ? {} : { required })
    },
    run: (ctx, raw) => {
      const checked = checkArgs(spec.params, raw)
      if ("problem" in checked) return Effect.succeed(errorResult(checked.problem))
      return spec.run(ctx, checked.args).pipe(
        Effect.map(textResult),
        Effect.catchTag("ToolFailure", (f) => Effect.succeed(errorResult(f.message)))
      )
    }
  }
}

// ---- reading provider JSON ----------------------------------------------------------------------

/** `get(issue, "user.login")`: a dotted path into unknown JSON; undefined when any step is missing. */
export const get = (value: unknown, path: string): unknown => {
  let current = value
  for (const key of path.split(".")) {
    if (typeof current !== "object" || current === null) return undefined
    current = (current as Record<string, unknown>)[key]
  }
  return current
}

export const asArray = (value: unknown): ReadonlyArray<unknown> => (Array.isArray(value) ? value : [])

/** An output field: a dotted path into the provider object, or a function of it. */
export type Field = string | ((value: unknown) => unknown)
export type Shape = Readonly<Record<string, Field>>

/** The compact subset: each output key from its field; absent (undefined) ones are left out. */
export const pick = (value: unknown, shape: Shape): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  for (const [key, field] of Object.entries(shape)) {
    const picked = typeof field === "string" ? get(value, field) : field(value)
    if (picked !== undefined) out[key] = picked
  }
  return out
}

export const pickEach = (value: unknown, shape: Shape): ReadonlyArray<Record<string, unknown>> =>
  asArray(value).map((item) => pick(item, shape))

/** A field listing one property of each element, e.g. label names: `pluck("labels", "name")`. */
export const pluck = (arrayPath: string, itemPath: string): Field => (value) =>
  Array.isArray(get(value, arrayPath)) ? asArray(get(value, arrayPath)).map((item) => get(item, itemPath)) : undefined
