// The two times of a graceful stop, read by the signal handling (src/StopSignals.ts), the
// listeners' drain and the settlement writer's final flush.
import { Config, Duration } from "effect"
import { durationMsConfig } from "./ConfigValues.js"

/** A stop signal this long after the first forces the stop; earlier ones are ignored. */
export const forceStopAfter = durationMsConfig("GATEWAY_FORCE_STOP_AFTER", 5_000)

/**
 * How long the graceful shutdown waits for requests in flight (the listeners, DrainingServer),
 * then as long again for queued settlements (Settlements).
 */
export const shutdownTimeout = durationMsConfig("GATEWAY_SHUTDOWN_TIMEOUT", 30_000, 1).pipe(Config.map(Duration.millis))
