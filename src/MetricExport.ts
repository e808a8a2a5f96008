// The gateway's metrics as an OpenTelemetry metric producer: Effect's producer
// (@effect/opentelemetry), with each descriptor's unit taken from layers/platform/Metrics.ts.
// Effect's producer reads a unit only from a `unit` tag, which would put `unit` on every data
// point (a label in Prometheus); the GenAI conventions' units (`s`, `{token}`) are set here instead.
import { Metrics, type Resource } from "@effect/opentelemetry"
import type { CollectionResult, MetricCollectOptions, MetricProducer, MetricReader } from "@opentelemetry/sdk-metrics"
import { Effect, Layer } from "effect"
import { metricUnits } from "../layers/platform/Metrics.js"

const withUnits = (result: CollectionResult): CollectionResult => ({
  ...result,
  resourceMetrics: {
    ...result.resourceMetrics,
    scopeMetrics: result.resourceMetrics.scopeMetrics.map((scope) => ({
      ...scope,
      metrics: scope.metrics.map((metric) => {
        const unit = metricUnits.get(metric.descriptor.name)
        return unit === undefined ? metric : { ...metric, descriptor: { ...metric.descriptor, unit } }
      })
    }))
  }
})

const unitsOf = (producer: MetricProducer): MetricProducer => ({
  collect: (options?: MetricCollectOptions) => producer.collect(options).then(withUnits)
})

/** Exports the gateway's metrics through `reader` (the OpenTelemetry resource comes from NodeSdk.layer). */
export const metricExportLayer = (reader: () => MetricReader): Layer.Layer<never, never, Resource.Resource> =>
  Layer.scopedDiscard(Effect.flatMap(Metrics.makeProducer, (producer) => Metrics.registerProducer(unitsOf(producer), reader)))
