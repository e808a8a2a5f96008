// Gateway metrics (Effect Metric, exported over OTLP with the traces when
// OTEL_EXPORTER_OTLP_ENDPOINT is set): requests, latency, tokens, cost, pre-flight rejections by
// code, webhook delivery outcomes, tool calls. Model calls also follow the OpenTelemetry GenAI
// semantic conventions (gen_ai.*: names, units, attributes and advised bucket boundaries).
import { Metric, MetricBoundaries, MetricKey, type MetricKeyType, MetricLabel } from "effect"

/**
 * Units by metric name (UCUM, as OpenTelemetry writes them). Effect's exporter takes a unit only
 * from a `unit` tag, which would also land on every data point; src/MetricExport.ts sets these
 * on the exported descriptors instead. Metrics not listed export unit "1".
 */
export const metricUnits = new Map<string, string>()

/** A histogram with explicit bucket boundaries (the last bucket, +Inf, is implied) and its unit. */
const histogram = (name: string, boundaries: ReadonlyArray<number>, unit: string, description: string) => {
  metricUnits.set(name, unit)
  return MetricKey.histogram(name, MetricBoundaries.fromIterable(boundaries), description)
}

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
  type Tagged = Metric.Metric<Type, MetricKeyType.MetricKeyType.InType<Type>, MetricKeyType.MetricKeyType.OutType<Type>>
  return madeOnce((...values: ReadonlyArray<string>): Tagged =>
    Metric.fromMetricKey(MetricKey.taggedWithLabels(key, names.map((name, i) => MetricLabel.make(name, values[i] ?? ""))))
  )
}

/**
 * `make`'s value for the given strings, made once per combination: a tree of maps, one level per
 * argument, so a lookup builds no key (no string joined per call).
 */
export const madeOnce = <A>(make: (...values: ReadonlyArray<string>) => A) => {
  const root = new Map<string, unknown>()
  return (...values: ReadonlyArray<string>): A => {
    let node = root
    const last = values.length - 1
    for (let i = 0; i < last; i++) {
      let next = node.get(values[i]!) as Map<string, unknown> | undefined
      if (next === undefined) {
        next = new Map()
        node.set(values[i]!, next)
      }
      node = next
    }
    const leaf = values[last] ?? ""
    if (node.has(leaf)) return node.get(leaf) as A
    const made = make(...values)
    node.set(leaf, made)
    return made
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

// The GenAI metrics of a model call. Each is tagged `gen_ai.operation.name`, `gen_ai.provider.name`,
// `gen_ai.request.model` (the gateway's model slug), `gen_ai.response.model` (the provider's model
// id) and `platform.id`; boundaries are the ones the conventions advise.

/** Tokens per settled call, one point per `gen_ai.token.type` (input|output). */
export const tokenUsage = histogram(
  "gen_ai.client.token.usage",
  [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864],
  "{token}",
  "Number of input and output tokens used per model call"
)

/** Admission to settlement in seconds; a call no upstream served is tagged `error.type` (its error code). */
export const requestDuration = histogram(
  "gen_ai.server.request.duration",
  [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92],
  "s",
  "Model call duration, from admission to settlement"
)

/** Streams: admission to the first content chunk, in seconds. */
export const timeToFirstToken = histogram(
  "gen_ai.server.time_to_first_token",
  [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0],
  "s",
  "Time to generate the first token of a streamed call"
)

/** Streams: seconds per output token after the first, of calls that completed. */
export const timePerOutputToken = histogram(
  "gen_ai.server.time_per_output_token",
  [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5],
  "s",
  "Time per output token generated after the first token of a streamed call"
)

/** USD cost of settled calls, tagged `gen_ai.request.model` and `platform.id` (exact in the ledger; a float here, for dashboards). */
export const costUsd = MetricKey.counter("gateway.cost_usd", { description: "USD cost of settled calls", incremental: true })

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
