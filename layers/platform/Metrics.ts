// Gateway metrics (Effect Metric, exported over OTLP with the traces when
// OTEL_EXPORTER_OTLP_ENDPOINT is set): requests, latency, tokens, cost, pre-flight rejections by
// code, webhook delivery outcomes, tool calls.
import { Metric, MetricBoundaries, MetricKey, type MetricKeyType, MetricLabel } from "effect"

/**
 * The metric with tags `names` = the given values, made once per combination of values. Effect's
 * Metric.tagged builds a new key (and hashes its description) on every single update; this one
 * is a metric of its own, pre-keyed, whose registry entry is looked up once. For tags of bounded
 * cardinality (operations, statuses, catalog models).
 */
export const taggedBy = <Type extends MetricKeyType.MetricKeyType<any, any>>(
  key: MetricKey.MetricKey<Type>,
  ...names: ReadonlyArray<string>
) => {
  const made = new Map<string, Metric.Metric<Type, MetricKeyType.MetricKeyType.InType<Type>, MetricKeyType.MetricKeyType.OutType<Type>>>()
  return (...values: ReadonlyArray<string>) => {
    const id = values.join("\u0000")
    let metric = made.get(id)
    if (metric === undefined) {
      metric = Metric.fromMetricKey(MetricKey.taggedWithLabels(key, names.map((name, i) => MetricLabel.make(name, values[i] ?? ""))))
      made.set(id, metric)
    }
    return metric
  }
}

/** Inference calls settled, tagged `operation` (chat|responses|embeddings) and `status` (success|interrupted|error). */
export const inferenceRequests = MetricKey.counter("gateway.inference.requests", {
  description: "Settled inference calls",
  incremental: true
})

/** Admission to settlement, in milliseconds. */
export const inferenceDuration = MetricKey.histogram(
  "gateway.inference.duration_ms",
  MetricBoundaries.exponential({ start: 1, factor: 2, count: 16 }),
  "Inference call duration from admission to settlement (ms)"
)

/** Tokens billed, tagged `gen_ai.token.type` (input|output) and `gen_ai.request.model`. */
export const tokensUsed = MetricKey.counter("gen_ai.client.token.usage", {
  description: "Tokens of settled calls",
  incremental: true
})

/** USD cost of settled calls (exact in the ledger; a float here, for dashboards). */
export const costUsd = MetricKey.counter("gateway.cost_usd", { description: "USD cost of settled calls" })

/** Pre-flight refusals, tagged `code` (model_not_found, rate_limit_exceeded, budget_suspended, ...). */
export const preflightRejections = MetricKey.counter("gateway.preflight.rejections", {
  description: "Inference calls refused before any upstream call",
  incremental: true
})

/** Settlements that could not be written after their retries: logged with billing_status `failed`. */
export const settlementFailures = Metric.counter("gateway.settlement.failures", {
  description: "Calls whose settlement failed after its retries (not billed, logged as failed)",
  incremental: true
})

/** Webhook delivery attempts, tagged `outcome` (delivered|retry|failed). */
export const webhookDeliveries = Metric.counter("gateway.webhook.deliveries", {
  description: "Webhook delivery attempts by outcome",
  incremental: true
})

/** Redis failures of the rate limiter, tagged `operation` (admit|settle) and `mode` (closed|open). */
export const rateLimiterErrors = Metric.counter("gateway.ratelimiter.errors", {
  description: "Rate limiter store failures",
  incremental: true
})

/**
 * Settlement groups written, tagged `path`: `statement` (the one-statement common case) or
 * `transaction` (period resets, low-balance and debit webhooks, display charges, replays).
 */
export const settlementGroups = MetricKey.counter("gateway.settlement.groups", {
  description: "Settlement groups written, by path (statement|transaction)",
  incremental: true
})

/** API key resolutions, tagged `source`: `cache` (no database read) or `database`. */
export const authLookups = MetricKey.counter("gateway.auth.lookups", {
  description: "API key resolutions by source (cache or database)",
  incremental: true
})

// Database pool usage, sampled every second (layers/platform/Database.ts). Names and attributes follow the
// OpenTelemetry database client semantic conventions; every point carries
// `db.client.connection.pool.name` = "model-gateway".

/** Open pool connections, tagged `db.client.connection.state`: `used` (checked out) or `idle`. */
export const dbPoolConnections = Metric.gauge("db.client.connection.count", {
  description: "Open connections of the Postgres pool by state (used|idle)"
})

/** The pool's ceiling: DATABASE_POOL_SIZE. */
export const dbPoolMax = Metric.gauge("db.client.connection.max", {
  description: "Maximum open connections of the Postgres pool (DATABASE_POOL_SIZE)"
})

/** Queries waiting for a connection because the pool is at its ceiling. */
export const dbPoolPending = Metric.gauge("db.client.connection.pending_requests", {
  description: "Requests waiting for a Postgres pool connection"
})
