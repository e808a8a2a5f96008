// Every time variable, by its name: the default when unset, the one duration format (`500ms`,
// `30s`, `5m`, `1h`, plain milliseconds) and Effect's older spelling, its least value, and a
// refusal that names it. A misspelt name would silently leave the default in force.
import { Config, ConfigProvider, Duration, Effect, Either } from "effect"
import { describe, expect, it } from "vitest"
import { admissionCacheTtlMs } from "../../layers/pipeline/AdmissionCache.js"
import { capabilityTiming } from "../../layers/capabilities/Capabilities.js"
import { upstreamTimeoutMs } from "../../layers/pipeline/Inference.js"
import { settlementLingerMs, settlementWaitMs } from "../../layers/ledger/SettlementSettings.js"
import { callRecordAfterMs, callRecordLingerMs, callSweepMs } from "../../layers/ledger/CallRecords.js"
import { mcpSessionTtl } from "../../layers/tools/ToolHost.js"
import { connectionLimits } from "../../src/http/DrainingServer.js"
import { DEFAULT_RETRY_SCHEDULE, retryScheduleConfig } from "../../layers/lib/RetrySchedule.js"
import { forceStopAfter, shutdownTimeout } from "../../layers/lib/StopTimes.js"
import { metricExportIntervalMs } from "../../src/Tracing.js"

const read = <A>(config: Config.Config<A>, env: Record<string, string>) =>
  Effect.runSync(Effect.either(config.pipe(Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))))

const toMs = Duration.toMillis
const variables: ReadonlyArray<{
  readonly name: string
  readonly formerName?: string
  readonly config: Config.Config<number>
  readonly defaultMs: number
  readonly min: 0 | 1
}> = [
  { name: "GATEWAY_SHUTDOWN_TIMEOUT", config: shutdownTimeout.pipe(Config.map(toMs)), defaultMs: 30_000, min: 1 },
  { name: "GATEWAY_FORCE_STOP_AFTER", config: forceStopAfter, defaultMs: 5_000, min: 0 },
  { name: "GATEWAY_SETTLEMENT_LINGER", config: settlementLingerMs, defaultMs: 25, min: 0 },
  { name: "GATEWAY_SETTLEMENT_WAIT", config: settlementWaitMs, defaultMs: 5_000, min: 1 },
  { name: "GATEWAY_CALL_RECORD_AFTER", config: callRecordAfterMs, defaultMs: 250, min: 0 },
  { name: "GATEWAY_CALL_SWEEP", config: callSweepMs, defaultMs: 10_000, min: 1 },
  { name: "GATEWAY_CALL_RECORD_LINGER", config: callRecordLingerMs, defaultMs: 2, min: 0 },
  { name: "GATEWAY_ADMISSION_CACHE_TTL", config: admissionCacheTtlMs, defaultMs: 1_000, min: 0 },
  { name: "GATEWAY_MCP_SESSION_TTL", config: mcpSessionTtl.pipe(Config.map(toMs)), defaultMs: 1_800_000, min: 1 },
  { name: "GATEWAY_UPSTREAM_TIMEOUT", formerName: "GATEWAY_UPSTREAM_TIMEOUT_MS", config: upstreamTimeoutMs, defaultMs: 60_000, min: 1 },
  {
    name: "GATEWAY_CAPABILITY_TIMEOUT",
    formerName: "GATEWAY_CAPABILITY_TIMEOUT_MS",
    config: capabilityTiming.pipe(Config.map((t) => t.timeoutMs)),
    defaultMs: 30_000,
    min: 1
  },
  {
    name: "GATEWAY_CAPABILITY_HOLD_GRACE",
    formerName: "GATEWAY_CAPABILITY_HOLD_GRACE_MS",
    config: capabilityTiming.pipe(Config.map((t) => t.graceMs)),
    defaultMs: 60_000,
    min: 0
  },
  {
    name: "GATEWAY_CAPABILITY_SWEEP",
    formerName: "GATEWAY_CAPABILITY_SWEEP_MS",
    config: capabilityTiming.pipe(Config.map((t) => t.sweepMs)),
    defaultMs: 30_000,
    min: 1
  },
  { name: "OTEL_METRIC_EXPORT_INTERVAL", config: metricExportIntervalMs, defaultMs: 15_000, min: 1 },
  { name: "GATEWAY_HEADERS_TIMEOUT", config: connectionLimits.pipe(Config.map((l) => l.headersTimeoutMs)), defaultMs: 20_000, min: 1 },
  { name: "GATEWAY_KEEPALIVE_TIMEOUT", config: connectionLimits.pipe(Config.map((l) => l.keepAliveTimeoutMs)), defaultMs: 5_000, min: 1 }
]

describe("time variables", () => {
  for (const v of variables) {
    it(`${v.name}: default ${v.defaultMs} ms, the one format and Effect's words, at least ${v.min}`, () => {
      expect(read(v.config, {})).toEqual(Either.right(v.defaultMs))
      for (const [text, ms] of [["1500ms", 1_500], ["2s", 2_000], ["250", 250], ["2 seconds", 2_000], ["1500 millis", 1_500]] as const) {
        expect(read(v.config, { [v.name]: text })).toEqual(Either.right(ms))
      }
      const zero = read(v.config, { [v.name]: "0" })
      expect(Either.isRight(zero) ? zero.right : String(zero.left)).toEqual(v.min === 0 ? 0 : expect.stringContaining("at least 1"))
      for (const bad of ["-1", "5x", ""]) {
        const refused = read(v.config, { [v.name]: bad })
        expect(Either.isLeft(refused) && String(refused.left)).toMatch(new RegExp(`${v.name}\\b.*a duration such as 500ms`))
      }
      if (v.formerName !== undefined) {
        expect(read(v.config, { [v.formerName]: "750" })).toEqual(Either.right(750))
        expect(read(v.config, { [v.formerName]: "750", [v.name]: "3s" })).toEqual(Either.right(3_000))
        const refused = read(v.config, { [v.formerName]: "soon" })
        expect(Either.isLeft(refused) && String(refused.left)).toContain(v.formerName)
      }
    })
  }

  it("GATEWAY_WEBHOOK_RETRY_SCHEDULE: each entry in the same format, days too", () => {
    expect(read(retryScheduleConfig, {})).toEqual(Either.right([0, 5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000]))
    expect(DEFAULT_RETRY_SCHEDULE).toBe("0s,5s,5m,30m,2h,5h,10h,10h")
    expect(read(retryScheduleConfig, { GATEWAY_WEBHOOK_RETRY_SCHEDULE: "0,100ms,5 seconds,1d" })).toEqual(Either.right([0, 100, 5_000, 86_400_000]))
    const refused = read(retryScheduleConfig, { GATEWAY_WEBHOOK_RETRY_SCHEDULE: "0s,-5s" })
    expect(Either.isLeft(refused) && String(refused.left)).toMatch(/GATEWAY_WEBHOOK_RETRY_SCHEDULE.*"-5s"/)
  })
})
