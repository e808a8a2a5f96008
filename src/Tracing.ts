// OpenTelemetry: spans go to OTEL_EXPORTER_OTLP_ENDPOINT (OTLP/HTTP) when it is set; off otherwise.
import { NodeSdk } from "@effect/opentelemetry"
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http"
import { BatchSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Config, Effect, Layer, Option } from "effect"

export const TracingLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const endpoint = yield* Config.option(Config.string("OTEL_EXPORTER_OTLP_ENDPOINT"))
    if (Option.isNone(endpoint)) return Layer.empty
    const serviceName = yield* Config.string("OTEL_SERVICE_NAME").pipe(Config.withDefault("model-gateway"))
    const base = endpoint.value.replace(/\/$/, "")
    return NodeSdk.layer(() => ({
      resource: { serviceName, serviceVersion: "0.1.0" },
      spanProcessor: new BatchSpanProcessor(new OTLPTraceExporter({ url: `${base}/v1/traces` }))
    }))
  })
)
