// OpenTelemetry: spans and metrics go to OTEL_EXPORTER_OTLP_ENDPOINT (OTLP/HTTP, /v1/traces and
// /v1/metrics) when it is set; off otherwise: then the SDK (tens of MB) is not even loaded and
// spans are not made at all (they would go nowhere, and cost CPU on every call). A client's
// traceparent still reaches upstreams and webhook receivers (layers/lib/CurrentSpan.ts).
import { Config, Effect, Layer, Option } from "effect"
import { durationMsConfig } from "../layers/lib/ConfigValues.js"

/** OpenTelemetry's standard name, whose value is plain milliseconds (the default unit here too). */
export const metricExportIntervalMs = durationMsConfig("OTEL_METRIC_EXPORT_INTERVAL", 15_000, 1)

export const TracingLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const endpoint = yield* Config.option(Config.string("OTEL_EXPORTER_OTLP_ENDPOINT"))
    if (Option.isNone(endpoint)) return Layer.setTracerEnabled(false)
    const serviceName = yield* Config.string("OTEL_SERVICE_NAME").pipe(Config.withDefault("model-gateway"))
    const intervalMs = yield* metricExportIntervalMs
    const base = endpoint.value.replace(/\/$/, "")
    const [{ NodeSdk }, { metricExportLayer }, { OTLPMetricExporter }, { OTLPTraceExporter }, { PeriodicExportingMetricReader }, { BatchSpanProcessor }] =
      yield* Effect.promise(() =>
        Promise.all([
          import("@effect/opentelemetry"),
          import("./MetricExport.js"),
          import("@opentelemetry/exporter-metrics-otlp-http"),
          import("@opentelemetry/exporter-trace-otlp-http"),
          import("@opentelemetry/sdk-metrics"),
          import("@opentelemetry/sdk-trace-base")
        ])
      )
    const metrics = metricExportLayer(() =>
      new PeriodicExportingMetricReader({
        exporter: new OTLPMetricExporter({ url: `${base}/v1/metrics` }),
        exportIntervalMillis: intervalMs
      })
    )
    return metrics.pipe(Layer.provideMerge(NodeSdk.layer(() => ({
      resource: { serviceName, serviceVersion: "0.1.0" },
      spanProcessor: new BatchSpanProcessor(new OTLPTraceExporter({ url: `${base}/v1/traces` }))
    }))))
  })
)
