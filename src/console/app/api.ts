// The console's only way to the gateway: same-origin fetches to the public API with the signed-in
// key as a Bearer token. Money fields keep their exact JSON text (see parseJson); API errors
// become ApiError with the gateway's code and message.
import { plainDecimal } from "./money"

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly param: string | null = null
  ) {
    super(message)
  }
}

/** Fields that hold money (USD or display units): read from the JSON text, never through a float. */
const moneyKey = /(^|_)(usd|max|used|remaining|amount|delta|display|balance)(_|$)/

/**
 * JSON.parse keeping money exact: the reviver's `source` (JSON.parse source text access, in
 * every current browser) is the number as the gateway wrote it.
 */
export const parseJson = (text: string): unknown =>
  JSON.parse(text, (key: string, value: unknown, context?: { source?: string }) =>
    typeof value === "number" && moneyKey.test(key)
      ? plainDecimal(context?.source ?? String(value))
      : value)

export interface RequestOptions {
  readonly body?: unknown
  readonly idempotencyKey?: string
  readonly query?: Record<string, string | number | boolean | undefined | null>
}

export type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE"

const queryString = (query: RequestOptions["query"]): string => {
  if (query === undefined) return ""
  const params = new URLSearchParams()
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") params.set(name, String(value))
  }
  const text = params.toString()
  return text === "" ? "" : `?${text}`
}

/** Told when a signed-in key stops working (revoked, expired, deleted): the shell signs out. */
let keyRefused: (error: ApiError) => void = () => undefined
export const onKeyRefused = (handler: (error: ApiError) => void): void => {
  keyRefused = handler
}

export const request = async <T>(key: string, method: Method, path: string, options: RequestOptions = {}): Promise<T> => {
  const headers: Record<string, string> = { authorization: `Bearer ${key}`, accept: "application/json" }
  if (options.body !== undefined) headers["content-type"] = "application/json"
  if (options.idempotencyKey !== undefined) headers["idempotency-key"] = options.idempotencyKey
  let response: Response
  try {
    response = await fetch(`${path}${queryString(options.query)}`, {
      method,
      headers,
      body: options.body === undefined ? null : JSON.stringify(options.body),
      credentials: "omit",
      cache: "no-store"
    })
  } catch {
    throw new ApiError(0, "network_error", "The gateway did not answer. Is it running?")
  }
  const text = await response.text()
  let body: unknown = null
  if (text !== "") {
    try {
      body = parseJson(text)
    } catch {
      body = text
    }
  }
  if (!response.ok) {
    const error = (body as { error?: { code?: string | null; message?: string; param?: string | null } } | null)?.error
    const failure = new ApiError(
      response.status,
      error?.code ?? `http_${response.status}`,
      error?.message ?? (typeof body === "string" && body !== "" ? body : `The gateway answered ${response.status}`),
      error?.param ?? null
    )
    if (response.status === 401) keyRefused(failure)
    throw failure
  }
  return body as T
}

/** A fresh Idempotency-Key for one money-moving action. */
export const newIdempotencyKey = (): string => `console-${crypto.randomUUID()}`

export interface Page<T> {
  readonly data: ReadonlyArray<T>
  readonly total: number
  readonly page: number
  readonly limit: number
}

export interface Backfill<T> {
  readonly data: ReadonlyArray<T>
  readonly limit: number
  readonly next_cursor: string | null
}
