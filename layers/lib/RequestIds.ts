// The HTTP exchange a call belongs to: its x-request-id (the client's when well-formed, else one
// the gateway mints) and the times its Server-Timing header reports. The id is per HTTP request;
// the completion or response id (`chatcmpl-…`, `resp_…`) names the answer, and one request may
// make several upstream calls (the hybrid loop), each logged with the same x-request-id.
import { FiberRef } from "effect"
import { performance } from "node:perf_hooks"
import { objectId } from "./Ids.js"

/** What a client may send as X-Request-Id and have echoed: 1 to 128 of these characters (no spaces, no quotes). */
const WELL_FORMED = /^[A-Za-z0-9._:-]{1,128}$/

/** The request's id: the client's `X-Request-Id` when well-formed (one header, the allowed characters), else `req_` + 32 hex. */
export const requestIdOf = (sent: string | ReadonlyArray<string> | undefined): string =>
  typeof sent === "string" && WELL_FORMED.test(sent) ? sent : objectId("req_")

/**
 * One HTTP request on the inference path: its id, when it arrived, and the upstream time so far
 * (milliseconds from performance.now()). Written by plain code as the call goes, so measuring
 * costs no Effect operation.
 */
export interface HttpExchange {
  readonly id: string
  readonly receivedAt: number
  /** When the first upstream call started (NaN: none yet). */
  upstreamStartedAt: number
  /** Time spent waiting on upstreams: each call from its start to its answer (a stream: its head). */
  upstreamMs: number
  /** The current upstream call's start (NaN: none in flight). */
  attemptStartedAt: number
}

export const httpExchange = (id: string, receivedAt = performance.now()): HttpExchange => ({
  id,
  receivedAt,
  upstreamStartedAt: Number.NaN,
  upstreamMs: 0,
  attemptStartedAt: Number.NaN
})

/** The exchange the running request belongs to (null: a call made outside an HTTP request). */
export const currentExchange: FiberRef.FiberRef<HttpExchange | null> = FiberRef.unsafeMake<HttpExchange | null>(null)

/** An upstream call (with its failover attempts) starts. */
export const upstreamStarted = (exchange: HttpExchange | null): void => {
  if (exchange === null) return
  const now = performance.now()
  if (Number.isNaN(exchange.upstreamStartedAt)) exchange.upstreamStartedAt = now
  exchange.attemptStartedAt = now
}

/** The upstream call answered (a stream: its head arrived). */
export const upstreamAnswered = (exchange: HttpExchange | null): void => {
  if (exchange === null || Number.isNaN(exchange.attemptStartedAt)) return
  exchange.upstreamMs += performance.now() - exchange.attemptStartedAt
  exchange.attemptStartedAt = Number.NaN
}

const ms = (value: number) => Math.max(0, value).toFixed(1)

/**
 * The Server-Timing header when the answer's head goes out: `gateway` is the time from the
 * request's arrival to its first upstream call (to now when none was made), `upstream` the
 * time upstreams took until then.
 */
export const serverTiming = (exchange: HttpExchange): string =>
  Number.isNaN(exchange.upstreamStartedAt)
    ? `gateway;dur=${ms(performance.now() - exchange.receivedAt)}`
    : `gateway;dur=${ms(exchange.upstreamStartedAt - exchange.receivedAt)}, upstream;dur=${ms(exchange.upstreamMs)}`
