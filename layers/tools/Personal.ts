// The per-user tool URL {mcp_url}/mcp: the skills family (when the platform has skills_enabled)
// and the capabilities agent tools (when capabilities are enabled), each wrapping the same
// service calls as the HTTP endpoints, so the same policy, scope and money rules apply.
import { Effect, Schema } from "effect"
import {
  CapabilityDetail,
  CapabilityList,
  RunRequest,
  RunResponse,
  SearchRequest,
  SearchResponse
} from "../../schemas/Capabilities.js"
import { Capabilities } from "../capabilities/Capabilities.js"
import type { EndUserPrincipal } from "../access/KeyAuth.js"
import { Skills } from "./Skills.js"
import type { ToolResult } from "./apps/ToolApp.js"
import type { ToolListing } from "./Catalog.js"

/** The app slug of the per-user tool URL `{mcp_url}/mcp` (skills, capability agent tools). */
export const PERSONAL = ""

/** The per-user tool URL's `server_label` in mcp-config and in hosted tool items of /v1/responses. */
export const PERSONAL_LABEL = "gateway"

const DEFAULT_PROVIDER_LIMIT = 12

const json = (value: unknown): ToolResult => ({ content: [{ type: "text", text: JSON.stringify(value) }] })
const failure = (message: string): ToolResult => ({ content: [{ type: "text", text: message }], isError: true })

interface Capable {
  readonly listing: ToolListing
  /** Search and run need the inference scope, as on the HTTP endpoints; browsing does not. */
  readonly needsInference: boolean
  readonly run: (caller: EndUserPrincipal, args: Readonly<Record<string, unknown>>) => Effect.Effect<ToolResult>
}

export const makePersonalTools = Effect.gen(function*() {
  const skills = yield* Skills
  const capabilities = yield* Capabilities

  /** An API error (403/404/402/422) is the tool's result, not a protocol failure. */
  const answer = <A, I>(schema: Schema.Schema<A, I>, effect: Effect.Effect<A, { readonly code: string; readonly message: string }>) =>
    effect.pipe(
      Effect.flatMap((value) => Schema.encode(schema)(value).pipe(Effect.orDie)),
      Effect.map(json),
      Effect.catchAll((e) => Effect.succeed(failure(`${e.code}: ${e.message}`)))
    )

  const decode = <A, I>(schema: Schema.Schema<A, I>, args: unknown) =>
    Schema.decodeUnknown(schema)(args).pipe(Effect.mapError((e) => ({ code: "invalid_arguments", message: e.message })))

  const capabilityTools: ReadonlyArray<Capable> = [
    {
      listing: {
        name: "list_capabilities",
        description: "List the capability shelves (search, scraping, enrichment, ...) with provider counts and prices.",
        inputSchema: { type: "object", properties: {} }
      },
      needsInference: false,
      run: (caller) => answer(CapabilityList, capabilities.listCapabilities(caller))
    },
    {
      listing: {
        name: "list_providers",
        description: "List the providers of one capability with prices, ratings and whether the platform policy allows them.",
        inputSchema: {
          type: "object",
          properties: {
            capability: { type: "string", description: "capability slug" },
            sort: { type: "string", enum: ["cost", "rating"] },
            max_cost: { type: "number", minimum: 0 },
            min_rating: { type: "number", minimum: 0, maximum: 5 },
            verified_only: { type: "boolean" },
            limit: { type: "integer", minimum: 1, maximum: 100, default: DEFAULT_PROVIDER_LIMIT }
          },
          required: ["capability"]
        }
      },
      needsInference: false,
      run: (caller, args) => {
        const slug = typeof args.capability === "string" ? args.capability : ""
        const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : undefined)
        return answer(
          CapabilityDetail,
          capabilities.listProviders(caller, slug, {
            sort: args.sort === "rating" ? "rating" : "cost",
            max_cost: num(args.max_cost),
            min_rating: num(args.min_rating),
            verified_only: args.verified_only === true,
            limit: num(args.limit) ?? DEFAULT_PROVIDER_LIMIT
          })
        )
      }
    },
    {
      listing: {
        name: "capability_search",
        description: "Find runnable providers for a task, ranked by relevance, within the platform's policy. No payment.",
        inputSchema: {
          type: "object",
          properties: { query: { type: "string", minLength: 1, maxLength: 500 }, limit: { type: "integer", minimum: 1, maximum: 25 } },
          required: ["query"]
        }
      },
      needsInference: true,
      run: (caller, args) =>
        answer(SearchResponse, Effect.flatMap(decode(SearchRequest, args), (body) => capabilities.search(caller, body.query, body.limit)))
    },
    {
      listing: {
        name: "capability_run",
        description: "Run a provider (by its cap_ uid) with an input; reserves a hold on the budget and pays only what was spent.",
        inputSchema: {
          type: "object",
          properties: {
            capability: { type: "string", description: "provider uid (cap_...)" },
            input: { type: "object" },
            max_pay: { type: "number", exclusiveMinimum: 0 }
          },
          required: ["capability"]
        }
      },
      needsInference: true,
      run: (caller, args) => answer(RunResponse, Effect.flatMap(decode(RunRequest, args), (body) => capabilities.run(caller, body)))
    }
  ]

  const capabilitiesEnabled = (caller: EndUserPrincipal) =>
    capabilities.listCapabilities(caller).pipe(Effect.map((list) => list.enabled), Effect.orElseSucceed(() => false))

  /** What this user's tool URL offers right now. */
  const list = (caller: EndUserPrincipal) =>
    Effect.gen(function*() {
      const offered: Array<ToolListing> = []
      if (yield* skills.enabled(caller.platformId)) offered.push(...skills.tools.map(({ run: _run, ...listing }) => listing))
      if (yield* capabilitiesEnabled(caller)) {
        // A key with only the tools scope is not offered what it could not run.
        const inference = caller.scopes.includes("inference")
        offered.push(...capabilityTools.filter((t) => inference || !t.needsInference).map((t) => t.listing))
      }
      return offered
    })

  /** Runs one of them; a tool the platform has not enabled is an error result. */
  const call = (caller: EndUserPrincipal, name: string, args: Readonly<Record<string, unknown>>) =>
    Effect.gen(function*() {
      const skill = skills.tools.find((t) => t.name === name)
      if (skill !== undefined) {
        if (!(yield* skills.enabled(caller.platformId))) return failure("Skills are not enabled for this platform")
        return yield* skill.run(caller, args)
      }
      const capability = capabilityTools.find((t) => t.listing.name === name)
      if (capability !== undefined) {
        if (!(yield* capabilitiesEnabled(caller))) return failure("capabilities_disabled: Capabilities are not enabled for this platform")
        return yield* capability.run(caller, args)
      }
      return failure(`Unknown tool ${name}`)
    })

  return { list, call } as const
})
