// One delivery attempt: the signed POST over HTTP, then its outcome recorded and the delivery
// moved on (delivered, retried on the schedule, or failed).
import { Headers, HttpTraceContext } from "@effect/platform"
import type { PgClient } from "@effect/sql-pg"
import { Clock, Effect, Metric, Option, Schema, type Tracer } from "effect"
import * as http from "node:http"
import * as https from "node:https"
import { WebhookEnvelope } from "../../../schemas/Webhooks.js"
import { annotateCurrentSpan, currentTraceparent } from "../../lib/CurrentSpan.js"
import { nextDelay } from "../../lib/RetrySchedule.js"
import { checkUrl, guardedLookup } from "../../lib/SsrfGuard.js"
import type { Crypto } from "../../platform/Crypto.js"
import { webhookDeliveries } from "../../platform/Metrics.js"
import type { ClaimedRow } from "./Dispatcher.js"
import { sign } from "./Signing.js"

/** The stored traceparent as a parent span; none when absent or malformed (the delivery starts a trace). */
const parentFrom = (traceparent: string | null): Option.Option<Tracer.ExternalSpan> =>
  traceparent === null ? Option.none() : HttpTraceContext.w3c(Headers.fromInput({ traceparent }))

interface Outcome {
  readonly httpStatus: number | null
  readonly error: string | null
}

/**
 * One POST with node:http(s). The SSRF-guarded `lookup` re-checks addresses at connect time; no
 * redirects are followed (a 3xx is a failed attempt). The timeout lives in Node, not in the
 * fiber, so an attempt in flight at shutdown still ends within `timeoutMs`; it covers the whole
 * exchange up to the response head (a receiver that accepts and never answers is cut).
 */
const post = (url: URL, headers: Record<string, string>, body: string, allowPrivate: boolean, timeoutMs: number) =>
  Effect.async<number, Error>((resume) => {
    const options: http.RequestOptions = {
      method: "POST",
      headers: { ...headers, "content-length": String(Buffer.byteLength(body)) }
    }
    if (!allowPrivate) options.lookup = guardedLookup
    const request = (url.protocol === "https:" ? https : http).request(url, options, (response) => {
      clearTimeout(timer)
      response.resume() // the body is ignored; drain it so the socket can be reused
      resume(Effect.succeed(response.statusCode ?? 0))
    })
    const timer = setTimeout(() => request.destroy(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs)
    request.on("error", (error) => {
      clearTimeout(timer)
      resume(Effect.fail(error))
    })
    request.end(body)
  })

/** `deliver`: one attempt at a claimed row, sent and recorded. */
export const makeDeliver = (options: {
  readonly sql: PgClient.PgClient
  readonly crypto: Crypto
  readonly schedule: ReadonlyArray<number>
  readonly sendTimeoutMs: number
  readonly allowPrivate: boolean
}) => {
  const { allowPrivate, crypto, schedule, sendTimeoutMs, sql } = options

  const encodeEnvelope = Schema.decodeUnknown(WebhookEnvelope)

  const send = (row: ClaimedRow): Effect.Effect<Outcome> =>
    Effect.gen(function*() {
      if (!row.endpoint_active) return { httpStatus: null, error: "endpoint is inactive" }
      // The SSRF check runs again on every attempt: DNS may have changed since registration.
      const url = yield* checkUrl(row.url, allowPrivate)
      const secret = yield* Effect.try(() => crypto.decrypt(row.secret_encrypted)).pipe(
        Effect.mapError(() => new Error("the endpoint's signing secret cannot be decrypted"))
      )
      // Re-decode the stored JSON so the body keeps the spec's field order (jsonb does not).
      const body = JSON.stringify(yield* encodeEnvelope(row.payload))
      const timestamp = Math.floor((yield* Clock.currentTimeMillis) / 1000)
      // The delivery span is the receiver's parent. Not signed: Standard Webhooks signs only
      // id, timestamp and body, and a receiver must not trust trace context for anything.
      const traceparent = yield* currentTraceparent
      const status = yield* post(url, {
        "content-type": "application/json",
        "user-agent": "model-gateway-webhooks/1",
        "webhook-id": row.webhook_id,
        "webhook-timestamp": String(timestamp),
        "webhook-signature": sign(secret, row.webhook_id, timestamp, body),
        ...(traceparent === null ? {} : { traceparent })
      }, body, allowPrivate, sendTimeoutMs)
      const ok = status >= 200 && status < 300
      return { httpStatus: status, error: ok ? null : `HTTP ${status}` }
    }).pipe(
      Effect.catchAll((e): Effect.Effect<Outcome> => Effect.succeed({ httpStatus: null, error: e.message }))
    )

  /**
   * Records the attempt and moves the delivery on, in one statement. `attempt = claimed attempt`
   * makes a late finisher (whose lease expired and was re-claimed) a no-op.
   */
  const complete = (row: ClaimedRow, outcome: Outcome) => {
    const made = row.attempt + 1
    const delivered = outcome.error === null
    const delay = delivered ? undefined : nextDelay(schedule, made)
    const status = delivered ? "delivered" : delay === undefined ? "failed" : "pending"
    const next = delay === undefined ? sql`NULL` : sql`now() + ${delay}::double precision * interval '1 millisecond'`
    const outcomeTag = status === "pending" ? "retry" : status
    return Metric.increment(Metric.tagged(webhookDeliveries, "outcome", outcomeTag)).pipe(Effect.zipRight(sql`WITH upd AS (
        UPDATE webhook_deliveries SET status = ${status}, attempt = ${made}, next_attempt_at = ${next},
          lease_until = NULL, last_http_status = ${outcome.httpStatus}, last_error = ${outcome.error}, updated_at = now()
        WHERE id = ${row.id} AND attempt = ${row.attempt} AND status = 'pending'
        RETURNING id, next_attempt_at)
      INSERT INTO webhook_delivery_attempts (delivery_id, attempt, http_status, error, status, next_attempt_at)
      SELECT id, ${made}, ${outcome.httpStatus}, ${outcome.error}, ${outcomeTag}, next_attempt_at FROM upd`), Effect.as(outcomeTag))
  }

  /**
   * One attempt (send and record) in a `WebhookOutbox.deliver` span whose parent is the enqueue
   * span stored with the event. Attributes name the delivery, never the URL (it may carry a
   * token of the tenant's) nor the secret. Uninterruptible so shutdown finishes (and records)
   * attempts in flight; Node's timeout bounds it.
   */
  const deliver = (row: ClaimedRow) =>
    Effect.gen(function*() {
      const outcome = yield* send(row)
      if (outcome.httpStatus !== null) yield* annotateCurrentSpan({ "http.response.status_code": outcome.httpStatus })
      yield* annotateCurrentSpan({ "webhook.outcome": yield* complete(row, outcome) })
    }).pipe(
      Effect.withSpan("WebhookOutbox.deliver", {
        kind: "client",
        attributes: {
          "webhook.delivery_id": row.id,
          "webhook.event_id": row.webhook_id,
          "webhook.event_type": row.event_type,
          "webhook.attempt": row.attempt + 1
        },
        ...Option.match(parentFrom(row.traceparent), { onNone: () => ({ root: true }), onSome: (parent) => ({ parent }) })
      }),
      Effect.uninterruptible
    )

  return deliver
}
