// In-process capability providers of demo mode. A catalog row whose URL is `mock://<name>` is
// answered here, without any network: only demo mode seeds such rows (the catalog file and the
// operator API accept http and https URLs only), and only a process in demo mode answers them.
import { BigDecimal } from "effect"
import type { CatalogEntry } from "../../schemas/Capabilities.js"
import { dec } from "../lib/Money.js"

/** What an in-process provider answers: the same fields as an HTTP answer. */
export interface DemoAnswer {
  readonly status: number
  readonly body: unknown
  readonly reportedCost: BigDecimal.BigDecimal
}

const SCHEME = "mock://"

/** A URL served in-process (never sent to the network, whatever the mode). */
export const isDemoUrl = (url: string): boolean => url.trim().toLowerCase().startsWith(SCHEME)

/** What `demo-search` reports per answered search (its catalog prices: 0.001 / 0.002 / 0.003). */
export const DEMO_SEARCH_COST = dec("0.002")
const DEFAULT_RESULTS = 3
const MAX_RESULTS = 10

/**
 * `demo-search`: `{query, num_results?}` (the catalog's web-search input) gives `num_results`
 * (default 3, at most 10) results `{title, url, snippet}` built from the query alone, so the
 * same input always gives the same answer, at 0.002 USD. Without a non-empty string `query` it
 * answers 422 at no cost.
 */
const demoSearch = (input: Readonly<Record<string, unknown>> | null): DemoAnswer => {
  const query = typeof input?.query === "string" ? input.query.trim() : ""
  if (query === "") {
    return { status: 422, body: { ok: false, error: "input.query must be a non-empty string" }, reportedCost: BigDecimal.make(0n, 0) }
  }
  const asked = input?.num_results
  const count = typeof asked === "number" && Number.isInteger(asked) && asked >= 1 ? Math.min(asked, MAX_RESULTS) : DEFAULT_RESULTS
  const results = Array.from({ length: count }, (_, i) => ({
    title: `Demo result ${i + 1} for "${query}"`,
    url: `https://example.com/demo-search/${i + 1}?q=${encodeURIComponent(query)}`,
    snippet: `Offline demo result ${i + 1} of ${count} for "${query}", answered inside the gateway (demo mode); no web page was fetched.`
  }))
  return { status: 200, body: { ok: true, query, results }, reportedCost: DEMO_SEARCH_COST }
}

const providers: Readonly<Record<string, (input: Readonly<Record<string, unknown>> | null) => DemoAnswer>> = {
  "demo-search": demoSearch
}

/** The answer of the in-process provider a `mock://<name>` URL names; undefined for an unknown name. */
export const demoAnswer = (url: string, input: Readonly<Record<string, unknown>> | null): DemoAnswer | undefined => {
  const name = url.trim().slice(SCHEME.length).replace(/\/+$/, "").toLowerCase()
  const provider = Object.hasOwn(providers, name) ? providers[name] : undefined
  return provider?.(input)
}

/**
 * The rows demo mode upserts: `demo-search` under `web-search` (the capability itself is created
 * only when the catalog file lacks it; an existing one is left as the file describes it).
 */
export const demoCatalog: ReadonlyArray<CatalogEntry> = [{
  capability: {
    slug: "web-search",
    name: "Web search",
    description: "Search the public web and get ranked results with titles, URLs and snippets.",
    domains: ["research", "news", "seo"],
    minted_by: "seed"
  },
  providers: [{
    slug: "demo-search",
    name: "Demo search (offline)",
    description: "Offline demo web search: deterministic results for any query, answered inside the gateway in demo mode.",
    url: `${SCHEME}demo-search`,
    call_method: "POST",
    protocol: "mock",
    min_price_usd: dec("0.001"),
    median_price_usd: DEMO_SEARCH_COST,
    max_price_usd: dec("0.003"),
    rating: 4,
    availability: "healthy",
    input_example: { query: "model gateways", num_results: 3 },
    input_schema: {
      type: "object",
      properties: { query: { type: "string" }, num_results: { type: "integer", minimum: 1, maximum: MAX_RESULTS } },
      required: ["query"],
      additionalProperties: false
    }
  }]
}]
