// WebhookEndpoints: the tenant's endpoints, capped per platform, and their deliveries.
import { PgClient } from "@effect/sql-pg"
import { Effect, Option } from "effect"
import { Conflict, NotFound, ValidationError } from "../../../schemas/Errors.js"
import {
  DEFAULT_EVENT_TYPES,
  type WebhookDelivery,
  type WebhookDeliveryAttempt,
  type WebhookEndpoint,
  type WebhookEndpointCreated,
  type WebhookEventType
} from "../../../schemas/Webhooks.js"
import { countConfig } from "../../lib/ConfigValues.js"
import { isUuid } from "../../lib/Ids.js"
import { offsetOf, paginate } from "../../lib/Pagination.js"
import { allowPrivateUrls, checkUrl } from "../../lib/SsrfGuard.js"
import { Crypto } from "../../platform/Crypto.js"
import { newSecret } from "./Signing.js"

/** The most endpoints one platform may register. */
export const maxEndpointsConfig = countConfig("GATEWAY_WEBHOOK_MAX_ENDPOINTS", 20)

interface EndpointRow {
  readonly id: string
  readonly platform_id: string
  readonly url: string
  readonly event_types: ReadonlyArray<WebhookEventType> | null
  readonly is_active: boolean
  readonly created_at: Date
}
const ENDPOINT_COLUMNS = "id, platform_id, url, event_types, is_active, created_at"

const toEndpoint = (row: EndpointRow): WebhookEndpoint => ({
  id: row.id,
  platform_id: row.platform_id,
  url: row.url,
  event_types: row.event_types ?? DEFAULT_EVENT_TYPES,
  is_active: row.is_active,
  created_at: row.created_at
})

interface DeliveryRow {
  readonly id: string
  readonly event_id: string
  readonly event_type: string
  readonly status: "pending" | "delivered" | "failed"
  readonly last_http_status: number | null
  readonly attempt: number
  readonly next_attempt_at: Date | null
  readonly last_error: string | null
  readonly created_at: Date
  readonly updated_at: Date
}

const toDelivery = (row: DeliveryRow): WebhookDelivery => ({
  id: row.id,
  event_id: row.event_id,
  event_type: row.event_type,
  status: row.status,
  http_status: row.last_http_status,
  attempt: row.attempt,
  next_attempt_at: row.next_attempt_at,
  last_error: row.last_error,
  created_at: row.created_at,
  updated_at: row.updated_at
})

const endpointNotFound = new NotFound({ code: "not_found", message: "No such webhook endpoint" })
const deliveryNotFound = new NotFound({ code: "not_found", message: "No such webhook delivery" })

interface AttemptRow {
  readonly id: string
  readonly delivery_id: string
  readonly event_id: string
  readonly event_type: string
  readonly attempt: number
  readonly status: WebhookDeliveryAttempt["status"]
  readonly http_status: number | null
  readonly error: string | null
  readonly next_attempt_at: Date | null
  readonly created_at: Date
}

/**
 * The tenant's endpoints and their deliveries (the /webhook-endpoints routes). A separate
 * service so ledger code and its test spies only ever see `enqueue`.
 */
export class WebhookEndpoints extends Effect.Service<WebhookEndpoints>()("gateway/WebhookEndpoints", {
  dependencies: [Crypto.Default],
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const crypto = yield* Crypto
    const allowPrivate = yield* allowPrivateUrls.pipe(Effect.orDie)

    const maxEndpoints = yield* maxEndpointsConfig.pipe(Effect.orDie)

    const endpointLimitReached = new Conflict({
      code: "conflict",
      message: `This platform already has the most webhook endpoints allowed (${maxEndpoints}); delete one before registering another`
    })

    /**
     * Counts and inserts under a lock of the platform row, so two registrations at the limit take
     * turns and only one passes. NO KEY UPDATE: rows that merely reference the platform (logs,
     * ledger entries) take KEY SHARE and are not held up.
     */
    const insertWithinLimit = (platformId: string, url: string, secret: string, eventTypes: ReadonlyArray<WebhookEventType> | undefined) =>
      Effect.gen(function*() {
        yield* sql`SELECT 1 FROM platforms WHERE id = ${platformId} FOR NO KEY UPDATE`
        const [counted] = yield* sql<{ total: number }>`SELECT count(*)::int AS total FROM webhook_endpoints
          WHERE platform_id = ${platformId}`
        if (counted!.total >= maxEndpoints) return yield* endpointLimitReached
        const [row] = yield* sql<EndpointRow>`INSERT INTO webhook_endpoints (platform_id, url, secret_encrypted, event_types)
          VALUES (${platformId}, ${url}, ${crypto.encrypt(secret)},
            ${eventTypes === undefined ? null : [...eventTypes]}::text[])
          RETURNING ${sql.literal(ENDPOINT_COLUMNS)}`
        return row!
      }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))

    const createEndpoint = (
      platformId: string,
      input: { readonly url: string; readonly event_types?: ReadonlyArray<WebhookEventType> | undefined }
    ) =>
      Effect.gen(function*() {
        // The URL's DNS check runs before the lock: nothing slow is done while holding it.
        yield* checkUrl(input.url, allowPrivate).pipe(
          Effect.mapError((e) => new ValidationError({ code: "validation_error", param: "url", message: e.message }))
        )
        const secret = newSecret()
        const row = yield* insertWithinLimit(platformId, input.url, secret, input.event_types)
        const created: WebhookEndpointCreated = { ...toEndpoint(row), secret }
        return created
      }).pipe(Effect.withSpan("WebhookOutbox.createEndpoint"))

    const listEndpoints = (platformId: string, params: { readonly page: number; readonly limit: number }) =>
      paginate(
        params,
        sql<{ total: number }>`SELECT count(*)::int AS total FROM webhook_endpoints WHERE platform_id = ${platformId}`,
        sql<EndpointRow>`SELECT ${sql.literal(ENDPOINT_COLUMNS)} FROM webhook_endpoints
          WHERE platform_id = ${platformId}
          ORDER BY created_at, id LIMIT ${params.limit} OFFSET ${offsetOf(params.page, params.limit)}`.pipe(
          Effect.map((rows) => rows.map(toEndpoint))
        )
      ).pipe(Effect.orDie)

    const findEndpoint = (platformId: string, endpointId: string) =>
      Effect.gen(function*() {
        if (!isUuid(endpointId)) return yield* endpointNotFound
        const rows = yield* sql<EndpointRow>`SELECT ${sql.literal(ENDPOINT_COLUMNS)} FROM webhook_endpoints
          WHERE id = ${endpointId} AND platform_id = ${platformId}`.pipe(Effect.orDie)
        return yield* Option.match(Option.fromNullable(rows[0]), {
          onNone: () => Effect.fail(endpointNotFound),
          onSome: Effect.succeed
        })
      })

    const getEndpoint = (platformId: string, endpointId: string) =>
      findEndpoint(platformId, endpointId).pipe(Effect.map(toEndpoint))

    /** Hard delete: its deliveries (pending ones included) and attempts go with it. */
    const deleteEndpoint = (platformId: string, endpointId: string) =>
      Effect.gen(function*() {
        if (!isUuid(endpointId)) return yield* endpointNotFound
        const rows = yield* sql`DELETE FROM webhook_endpoints WHERE id = ${endpointId} AND platform_id = ${platformId}
          RETURNING id`.pipe(Effect.orDie)
        if (rows.length === 0) return yield* endpointNotFound
      })

    const listDeliveries = (
      platformId: string,
      endpointId: string,
      params: { readonly page: number; readonly limit: number }
    ) =>
      Effect.gen(function*() {
        yield* findEndpoint(platformId, endpointId)
        return yield* paginate(
          params,
          sql<{ total: number }>`SELECT count(*)::int AS total FROM webhook_deliveries WHERE endpoint_id = ${endpointId}`,
          sql<DeliveryRow>`SELECT d.id, e.event_id, e.event_type, d.status, d.last_http_status, d.attempt,
              d.next_attempt_at, d.last_error, d.created_at, d.updated_at
            FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
            WHERE d.endpoint_id = ${endpointId}
            ORDER BY d.created_at DESC, d.id DESC
            LIMIT ${params.limit} OFFSET ${offsetOf(params.page, params.limit)}`.pipe(
            Effect.map((rows) => rows.map(toDelivery))
          )
        ).pipe(Effect.orDie)
      })

    /** A delivery's attempts, first to last; the delivery must be one of this endpoint's. */
    const listAttempts = (
      platformId: string,
      endpointId: string,
      deliveryId: string,
      params: { readonly page: number; readonly limit: number }
    ) =>
      Effect.gen(function*() {
        yield* findEndpoint(platformId, endpointId)
        const found = isUuid(deliveryId)
          ? yield* sql`SELECT 1 FROM webhook_deliveries WHERE id = ${deliveryId} AND endpoint_id = ${endpointId}`.pipe(Effect.orDie)
          : []
        if (found.length === 0) return yield* deliveryNotFound
        return yield* paginate(
          params,
          sql<{ total: number }>`SELECT count(*)::int AS total FROM webhook_delivery_attempts WHERE delivery_id = ${deliveryId}`,
          sql<AttemptRow>`SELECT a.id, a.delivery_id, e.event_id, e.event_type, a.attempt,
              coalesce(a.status, CASE WHEN a.error IS NULL THEN 'delivered' ELSE 'failed' END) AS status, a.http_status, a.error,
              a.next_attempt_at, a.created_at
            FROM webhook_delivery_attempts a
              JOIN webhook_deliveries d ON d.id = a.delivery_id
              JOIN webhook_events e ON e.id = d.event_id
            WHERE a.delivery_id = ${deliveryId}
            ORDER BY a.attempt, a.id
            LIMIT ${params.limit} OFFSET ${offsetOf(params.page, params.limit)}`.pipe(
            Effect.map((rows) => rows.map((row): WebhookDeliveryAttempt => row))
          )
        ).pipe(Effect.orDie)
      })

    return { createEndpoint, listEndpoints, getEndpoint, deleteEndpoint, listDeliveries, listAttempts } as const
  })
}) {}
