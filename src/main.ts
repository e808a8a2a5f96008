// Entry point: `npm start` runs its esbuild bundle (node dist/main.js [--role all|api|tools]).
// Builds every layer, prints the listening addresses (and demo keys), and shuts down gracefully
// on SIGINT/SIGTERM (src/StopSignals.ts).
import "./GcTuningAtStart.js" // first: V8 garbage-collector settings, before the rest is loaded
import { Command, Options } from "@effect/cli"
import { NodeContext } from "@effect/platform-node"
import { Config, Console, Effect, Layer, Redacted } from "effect"
import { AdminKey } from "../layers/AdminKey.js"
import { EmbeddedPostgresUnavailable } from "../layers/EmbeddedPostgres.js"
import { appLayer, type Role } from "./App.js"
import { demoEnabled, seedDemo } from "./Demo.js"
import { cutDrainingConnections } from "./http/DrainingServer.js"
import { Listeners } from "./Listeners.js"
import { runMain } from "./StopSignals.js"

/** {base_url} / {mcp_url} as clients see them: GATEWAY_*_PUBLIC_URL, else the bound address. */
const publicUrl = (variable: string, bound: string | undefined) =>
  Config.string(variable).pipe(Config.withDefault(bound ?? ""))

const report = Effect.gen(function*() {
  const listeners = yield* Listeners
  const bound = yield* listeners.all
  const admin = yield* AdminKey
  const apiUrl = yield* publicUrl("GATEWAY_PUBLIC_URL", bound.api)
  const mcpUrl = yield* publicUrl("GATEWAY_MCP_PUBLIC_URL", bound.tools)
  if (bound.api !== undefined) yield* Console.log(`API listening on ${bound.api}  (base_url ${apiUrl}, docs ${apiUrl}/docs)`)
  if (bound.tools !== undefined) yield* Console.log(`Tool service listening on ${bound.tools}  (mcp_url ${mcpUrl})`)
  if (admin.generated) yield* Console.log(`Operator key (generated, kept in the data dir): ${Redacted.value(admin.key)}`)
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
        ""
      ].join("\n")
    )
  }
})

const role = Options.choice("role", ["all", "api", "tools"] as const).pipe(Options.withDefault("all" as Role))

/** A start that cannot work says why and what to do in one line (no stack trace), exit code 1. */
const cannotStart = (e: EmbeddedPostgresUnavailable) =>
  Console.error(e.message).pipe(Effect.zipRight(Effect.sync(() => (process.exitCode = 1))))

const gateway = Command.make("gateway", { role }, ({ role }) =>
  Layer.launch(Layer.effectDiscard(report).pipe(Layer.provideMerge(appLayer(role)))).pipe(
    Effect.catchIf((e): e is EmbeddedPostgresUnavailable => e instanceof EmbeddedPostgresUnavailable, cannotStart)
  ))

const cli = Command.run(gateway, { name: "model-gateway", version: "0.1.0" })

runMain(cli(process.argv).pipe(Effect.provide(NodeContext.layer)), cutDrainingConnections)
