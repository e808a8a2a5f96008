// Entry point: `npm start` runs its esbuild bundle (node dist/main.js [--role all|api|tools]).
// Builds every layer, prints the listening addresses (and demo keys), and shuts down gracefully
// on SIGINT/SIGTERM (src/StopSignals.ts).
import "./GcTuningAtStart.js" // first: V8 garbage-collector settings, before the rest is loaded
import { Command, Options } from "@effect/cli"
import { NodeContext } from "@effect/platform-node"
import { HttpServerError } from "@effect/platform"
import { Config, Console, Effect, Layer, Redacted } from "effect"
import { AdminKey } from "../layers/access/AdminKey.js"
import { EmbeddedPostgresUnavailable, GatewayAlreadyRunning } from "../layers/platform/EmbeddedPostgres.js"
import { appLayer, type Role } from "./App.js"
import { demoEnabled, seedDemo } from "./Demo.js"
import { cutDrainingConnections } from "./http/DrainingServer.js"
import { type Bind, Listeners } from "../layers/platform/Listeners.js"
import { runMain } from "./StopSignals.js"

/** {base_url} / {mcp_url} as clients see them: GATEWAY_*_PUBLIC_URL, else the bound address. */
const publicUrl = (variable: string, bound: string | undefined) =>
  Config.string(variable).pipe(Config.withDefault(bound ?? ""))

/** A start line: the bound address, and for a wildcard bind that every interface listens. */
const listening = (what: string, bind: Bind, urls: string) =>
  bind.wildcard ? `${what} listening on ${bind.address} (all interfaces; ${urls})` : `${what} listening on ${bind.address}  (${urls})`

const report = Effect.gen(function*() {
  const listeners = yield* Listeners
  const bound = yield* listeners.all
  const binds = yield* listeners.binds
  const admin = yield* AdminKey
  const apiUrl = yield* publicUrl("GATEWAY_PUBLIC_URL", bound.api)
  const mcpUrl = yield* publicUrl("GATEWAY_MCP_PUBLIC_URL", bound.tools)
  if (binds.api !== undefined) yield* Console.log(listening("API", binds.api, `base_url ${apiUrl}, docs ${apiUrl}/docs, console ${apiUrl}/console`))
  if (binds.tools !== undefined) yield* Console.log(listening("Tool service", binds.tools, `mcp_url ${mcpUrl}`))
  if (admin.unprinted) {
    yield* Console.log(`Operator key (generated, kept in the data dir): ${Redacted.value(admin.key)}`)
    yield* admin.printed
  }
  if (bound.api !== undefined && (yield* demoEnabled)) {
    const demo = yield* seedDemo
    yield* Console.log(
      [
        "",
        "Demo platform ready:",
        `  platform id:   ${demo.platform_id}`,
        `  platform key:  ${demo.platform_key}`,
        `  end-user key:  ${demo.end_user_key}`,
        "Try:",
        `  curl -s ${apiUrl}/v1/chat/completions -H "Authorization: Bearer ${demo.end_user_key}" \\`,
        `    -H "content-type: application/json" -d '{"model":"mock-echo","messages":[{"role":"user","content":"hello"}]}'`,
        `  curl -s ${apiUrl}/v1/embeddings -H "Authorization: Bearer ${demo.end_user_key}" \\`,
        `    -H "content-type: application/json" -d '{"model":"mock-embed","input":"hello"}'`,
        ""
      ].join("\n")
    )
  }
})

const role = Options.choice("role", ["all", "api", "tools"] as const).pipe(Options.withDefault("all" as Role))

/** A start that cannot work says why and what to do in one line (no stack trace), exit code 1. */
const cannotStart = (message: string) =>
  Console.error(message).pipe(Effect.zipRight(Effect.sync(() => (process.exitCode = 1))))

/** The one line for a failure the operator can fix; undefined for any other (printed in full). */
const fixableFailure = (e: unknown): string | undefined => {
  if (e instanceof EmbeddedPostgresUnavailable || e instanceof GatewayAlreadyRunning) return e.message
  if (!(e instanceof HttpServerError.ServeError)) return undefined
  // A listener's port taken (another gateway, another program), or not allowed.
  const cause = e.cause as { readonly code?: unknown; readonly address?: unknown; readonly port?: unknown } | null
  const code = cause?.code
  if (code !== "EADDRINUSE" && code !== "EACCES" && code !== "EADDRNOTAVAIL") return undefined
  const where = typeof cause?.address === "string" ? `${cause.address}:${String(cause.port)}` : "its address"
  const why = code === "EADDRINUSE" ? "the address is in use" : code === "EACCES" ? "permission denied" : "no such address here"
  return `cannot listen on ${where}: ${why}; stop what uses it, or set PORT (API), MCP_PORT (tool service) or HOST`
}

const gateway = Command.make("gateway", { role }, ({ role }) =>
  Layer.launch(Layer.effectDiscard(report).pipe(Layer.provideMerge(appLayer(role)))).pipe(
    Effect.catchAll((e) => {
      const line = fixableFailure(e)
      return line === undefined ? Effect.fail(e) : cannotStart(line)
    })
  ))

const cli = Command.run(gateway, { name: "model-gateway", version: "0.1.0" })

runMain(cli(process.argv).pipe(Effect.provide(NodeContext.layer)), cutDrainingConnections)
