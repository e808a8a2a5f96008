// How the process answers SIGINT/SIGTERM/SIGHUP (a closed terminal). The first starts the graceful shutdown (the program's
// scope closes: listeners drain, queued settlements are written, spans flushed). Repeats within
// GATEWAY_FORCE_STOP_AFTER are ignored; one after it forces the stop (see runMain).
import { makeRunMain } from "@effect/platform/Runtime"
import { Effect, Logger } from "effect"
import { forceStopAfter } from "../layers/lib/StopTimes.js"

/** SIGHUP too: closing the terminal that runs `npm start` stops the gateway cleanly, not at once. */
const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const

/**
 * NodeRuntime.runMain with a stop policy that survives repeated signals. Effect's own removes its
 * handlers at the first signal, so a second one got Node's default action and killed the process
 * mid-drain, and npm (which forwards a signal to its child) and systemd (which signals the whole
 * control group) deliver a single stop twice. Here every signal after the first is handled:
 * within the grace period it is a duplicate and ignored; after it, `onForcedStop` runs once (the
 * listeners cut their requests in flight, which are settled as at the shutdown deadline) and the
 * rest of the shutdown goes on. SIGKILL is the way to end the process at once (queued
 * settlements survive it in the settlement journal).
 */
export const runMain = <A, E>(program: Effect.Effect<A, E>, onForcedStop: () => void): void => {
  let graceMs = 5_000
  const configured = Effect.zipRight(
    Effect.flatMap(forceStopAfter, (ms) => Effect.sync(() => (graceMs = ms))),
    program
  )
  const say = (message: string) => Effect.runSync(Effect.logWarning(message).pipe(Effect.provide(Logger.pretty)))
  makeRunMain(({ fiber, teardown }) => {
    const keepAlive = setInterval(() => {}, 2 ** 31 - 1)
    let firstAt: number | undefined
    let forced = false
    const told = new Set<"draining" | "forced">()

    const onSignal = (signal: NodeJS.Signals) => {
      const now = performance.now()
      if (firstAt === undefined) {
        firstAt = now
        say(`${signal}: shutting down; requests in flight may finish (GATEWAY_SHUTDOWN_TIMEOUT)`)
        fiber.unsafeInterruptAsFork(fiber.id())
      } else if (!forced && now - firstAt >= graceMs) {
        forced = true
        say(`${signal}: forced stop; requests in flight are cut (and settled for what they emitted)`)
        onForcedStop()
      } else if (!told.has(forced ? "forced" : "draining")) {
        told.add(forced ? "forced" : "draining")
        say(
          forced
            ? `${signal} ignored: the forced stop is finishing (writing settlements); SIGKILL ends the process at once`
            : `${signal} ignored: already shutting down; a signal at least ${graceMs} ms after the first forces the stop (GATEWAY_FORCE_STOP_AFTER)`
        )
      }
    }
    for (const signal of SIGNALS) process.on(signal, onSignal)

    fiber.addObserver((exit) => {
      clearInterval(keepAlive)
      // Without a signal (`--help`, a failed start) the handlers go, so nothing keeps the process.
      if (firstAt === undefined) for (const signal of SIGNALS) process.removeListener(signal, onSignal)
      teardown(exit, (code) => {
        if (firstAt !== undefined || code !== 0) process.exit(code)
      })
    })
  })(configured)
}
