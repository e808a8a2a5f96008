// Listing and running tools as the end user: an app's tools with its OAuth token, metered per
// call, or the tools of the per-user URL (PERSONAL), metered as display-only.
import { Clock, Effect, Either } from "effect"
import type { Forbidden, NotFound } from "../../schemas/Errors.js"
import type { EndUserPrincipal } from "../access/KeyAuth.js"
import type { AccessTokens } from "./AccessTokens.js"
import type { Activations } from "./Activations.js"
import { findTool, listingOf, type ToolListing } from "./Catalog.js"
import type { Connections } from "./Connections.js"
import type { makeMetering } from "./Metering.js"
import type { AppUrls } from "./OAuth.js"
import { type makePersonalTools, PERSONAL, PERSONAL_LABEL } from "./Personal.js"
import { reauthNeeded, refused, text } from "./ToolResults.js"
import { requireToolScope } from "./ToolScope.js"
import type { ToolApp, ToolResult } from "./apps/ToolApp.js"

export interface ToolCallDeps {
  readonly activations: Activations
  readonly connections: Connections
  readonly accessTokens: AccessTokens
  readonly metering: Effect.Effect.Success<typeof makeMetering>
  readonly personal: Effect.Effect.Success<typeof makePersonalTools>
  readonly urlsOf: (app: ToolApp) => AppUrls
}

export const makeToolCalls = ({ accessTokens, activations, connections, metering, personal, urlsOf }: ToolCallDeps) => {
  const callPersonal = (principal: EndUserPrincipal, name: string, args: Readonly<Record<string, unknown>>) =>
    personal.call(principal, name, args).pipe(Effect.tap(() => metering.displayOnly(principal)))

  /**
   * The app's tools as MCP lists them (`{slug}_{tool}`); NotFound unless active on the platform.
   * PERSONAL: what the per-user URL offers this key (perhaps nothing).
   */
  const listTools = (principal: EndUserPrincipal, slug: string): Effect.Effect<ReadonlyArray<ToolListing>, Forbidden | NotFound> =>
    slug === PERSONAL
      ? requireToolScope(principal).pipe(Effect.zipRight(personal.list(principal)))
      : requireToolScope(principal).pipe(
        Effect.zipRight(activations.activeApp(principal.platformId, slug)),
        Effect.map(({ app }): ReadonlyArray<ToolListing> => listingOf(app))
      )

  /** One tool of the per-user URL (metered as display-only, like its MCP calls). */
  const callPersonalTool = (principal: EndUserPrincipal, toolName: string, args: Readonly<Record<string, unknown>>) =>
    requireToolScope(principal).pipe(
      Effect.zipRight(callPersonal(principal, toolName, args)),
      Effect.withSpan("ToolHost.callTool", { attributes: { "tool.app": PERSONAL_LABEL, "tool.name": toolName } })
    )

  /**
   * Runs one tool as the end user and meters it. Only calls that go to the provider count
   * (and, past the free tier, cost, paid before the call: checks 3 to 5 may refuse it); a 401
   * from the provider marks the connection for re-auth. App-level failures and refusals are
   * `isError` results, never Effect failures.
   */
  const callAppTool = (principal: EndUserPrincipal, slug: string, toolName: string, args: Readonly<Record<string, unknown>>) =>
    Effect.gen(function*() {
      // Before anything reaches the provider or the meter.
      yield* requireToolScope(principal)
      const { app, activation: act } = yield* activations.activeApp(principal.platformId, slug)
      const tool = findTool(app, toolName)
      if (tool === undefined) return text(`Unknown tool ${toolName} for app ${slug}`, true)
      const token = yield* accessTokens.accessToken(principal, app, act)
      if (Either.isLeft(token)) return token.left
      // Counted, and past the free tier paid, before it reaches the provider.
      const charged = yield* metering.charge(principal, { appSlug: app.slug, tool: tool.name })
      if (charged._tag === "Refused") return refused(charged.refusal)
      if (charged._tag === "Unavailable") return text(`The ${slug} tool ${tool.name} could not be metered and did not run; nothing was charged`, true)
      const started = yield* Clock.currentTimeMillis
      const outcome = yield* tool.run({ apiUrl: urlsOf(app).apiUrl, accessToken: token.right.value }, args).pipe(
        Effect.catchAllDefect((defect) =>
          Effect.logError("tool crashed", defect).pipe(
            Effect.as<ToolResult>(text(`The ${slug} tool ${tool.name} failed unexpectedly`, true))
          )
        ),
        Effect.either
      )
      const latencyMs = (yield* Clock.currentTimeMillis) - started
      if (Either.isLeft(outcome) && outcome.left.reauth) {
        yield* connections.markReauth(token.right.connectionId)
        return reauthNeeded(slug)
      }
      const result = Either.isRight(outcome)
        ? outcome.right
        : text(`${slug} API error${outcome.left.status === null ? "" : ` (HTTP ${outcome.left.status})`}: ${outcome.left.message}`, true)
      const failed = result.isError === true
      yield* metering.record(charged, {
        status: failed ? "error" : "success",
        errorMessage: failed ? (result.content[0]?.text ?? "error").slice(0, 1000) : null,
        latencyMs
      })
      return result
    }).pipe(Effect.withSpan("ToolHost.callTool", { attributes: { "tool.app": slug, "tool.name": toolName } }))

  /** A tool of an app, or of the per-user URL (PERSONAL). */
  const callTool = (
    principal: EndUserPrincipal,
    slug: string,
    toolName: string,
    args: Readonly<Record<string, unknown>>
  ): Effect.Effect<ToolResult, Forbidden | NotFound> =>
    slug === PERSONAL ? callPersonalTool(principal, toolName, args) : callAppTool(principal, slug, toolName, args)

  return { callPersonal, listTools, callAppTool, callTool } as const
}

export type ToolCalls = ReturnType<typeof makeToolCalls>
