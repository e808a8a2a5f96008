// The catalog: seeding from catalog/capabilities.json (and the demo providers) at start, the
// operator's upserts, and the provider credentials the catalog file names. Credentials come from
// the file (which environment variable, which header) and the environment (the value, read at
// each call); the database never holds them.
import type { PgClient } from "@effect/sql-pg"
import { Config, Effect, Option, Redacted, Schema } from "effect"
import { readFileSync } from "node:fs"
import { CatalogFile, type CatalogEntry, type CatalogUpserted, type ProviderAuth } from "../../schemas/Capabilities.js"
import { sqlDec } from "../lib/Money.js"
import { packageFile } from "../lib/PackageRoot.js"
import { demoCatalog } from "./DemoProviders.js"
import type { Credential } from "./ProviderCall.js"
import { type CapabilityRow, type JoinedRow, price, type providerColumnsOf, type ProviderRow, rating, uidOf } from "./Rows.js"

const DEFAULT_CATALOG = packageFile("catalog/capabilities.json")

/** The catalog file the service seeds from. */
export const catalogPathConfig = Config.string("GATEWAY_CAPABILITY_CATALOG").pipe(Config.withDefault(DEFAULT_CATALOG))

/** A header value Node accepts (no control characters but tab). */
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/

/** The catalog's operations on one connection pool; the service builds it once. */
export const makeCatalog = (
  sql: PgClient.PgClient,
  providerColumns: ReturnType<typeof providerColumnsOf>,
  config: { readonly catalogPath: string; readonly demo: boolean }
) => {
  /**
   * Upserts one capability and its providers; the seed never overwrites operator-written rows.
   * `keepCapability`: an existing capability row is left as it is (demo providers join the
   * catalog file's capability without redefining it).
   */
  const upsertEntry = (entry: CatalogEntry, source: "seed" | "admin", keepCapability = false) =>
    Effect.gen(function*() {
      const c = entry.capability
      yield* sql`INSERT INTO capabilities (slug, name, description, domains, minted_by, is_active, source)
        VALUES (${c.slug}, ${c.name}, ${c.description ?? null}, ${[...(c.domains ?? [])]}::text[],
          ${c.minted_by ?? "seed"}, ${c.is_active ?? true}, ${source})
        ON CONFLICT (slug) ${keepCapability ? sql`DO NOTHING` : sql`DO UPDATE SET name = EXCLUDED.name, description = EXCLUDED.description,
          domains = EXCLUDED.domains, minted_by = EXCLUDED.minted_by, is_active = EXCLUDED.is_active,
          source = EXCLUDED.source, updated_at = now()
        WHERE capabilities.source = 'seed' OR EXCLUDED.source = 'admin'`}`
      const [cap] = yield* sql<CapabilityRow>`SELECT id, slug, name, description, domains, minted_by, is_active
        FROM capabilities WHERE slug = ${c.slug}`
      for (const p of entry.providers) {
        yield* sql`INSERT INTO capability_providers (capability_id, slug, name, description, url, call_method, protocol,
            min_price_usd, median_price_usd, max_price_usd, rating, availability, last_synced_at, input_example,
            input_schema, is_active, source)
          VALUES (${cap!.id}, ${p.slug}, ${p.name ?? null}, ${p.description ?? null}, ${p.url}, ${p.call_method},
            ${p.protocol}, ${p.min_price_usd == null ? null : sqlDec(p.min_price_usd)},
            ${p.median_price_usd == null ? null : sqlDec(p.median_price_usd)},
            ${p.max_price_usd == null ? null : sqlDec(p.max_price_usd)}, ${p.rating ?? null},
            ${p.availability ?? "unknown"}, ${p.last_synced_at ?? null},
            ${p.input_example == null ? null : sql.json(p.input_example)},
            ${p.input_schema == null ? null : sql.json(p.input_schema)}, ${p.is_active ?? true}, ${source})
          ON CONFLICT (capability_id, slug) DO UPDATE SET name = EXCLUDED.name, description = EXCLUDED.description,
            url = EXCLUDED.url, call_method = EXCLUDED.call_method, protocol = EXCLUDED.protocol,
            min_price_usd = EXCLUDED.min_price_usd, median_price_usd = EXCLUDED.median_price_usd,
            max_price_usd = EXCLUDED.max_price_usd, rating = EXCLUDED.rating, availability = EXCLUDED.availability,
            last_synced_at = EXCLUDED.last_synced_at, input_example = EXCLUDED.input_example,
            input_schema = EXCLUDED.input_schema, is_active = EXCLUDED.is_active, source = EXCLUDED.source,
            updated_at = now()
          WHERE capability_providers.source = 'seed' OR EXCLUDED.source = 'admin'`
      }
      const providers = yield* sql<ProviderRow>`SELECT ${providerColumns} FROM capability_providers p
        WHERE p.capability_id = ${cap!.id} AND p.slug IN ${sql.in(entry.providers.map((p) => p.slug))}
        ORDER BY p.slug`
      return { cap: cap!, providers }
    })

  /** POST /v1/admin/capabilities/providers. */
  const upsertCatalog = (entry: CatalogEntry): Effect.Effect<CatalogUpserted> =>
    Effect.gen(function*() {
      const { cap, providers } = yield* upsertEntry(entry, "admin").pipe(sql.withTransaction)
      return {
        capability: {
          slug: cap.slug,
          name: cap.name,
          description: cap.description,
          domains: cap.domains,
          minted_by: cap.minted_by,
          is_active: cap.is_active
        },
        providers: providers.map((p) => ({
          uid: uidOf(p.id),
          slug: p.slug,
          name: p.name,
          description: p.description,
          url: p.url,
          call_method: p.call_method,
          protocol: p.protocol,
          min_price_usd: price(p.min_price_usd),
          median_price_usd: price(p.median_price_usd),
          max_price_usd: price(p.max_price_usd),
          rating: rating(p),
          availability: p.availability,
          last_synced_at: p.last_synced_at,
          input_example: p.input_example ?? null,
          input_schema: p.input_schema ?? null,
          is_active: p.is_active
        }))
      }
    }).pipe(Effect.orDie, Effect.withSpan("Capabilities.upsertCatalog", { attributes: { "capability.slug": entry.capability.slug } }))

  /**
   * The catalog file's credentials by `capability/provider`, each bound to the URL the file gives
   * that provider: a row whose URL differs (an operator upsert moved it) is called without it.
   */
  const credentials = new Map<string, { readonly url: string; readonly auth: ProviderAuth }>()

  /** Loads the seed file; idempotent, so every start (and every instance) may run it. */
  const seed = Effect.gen(function*() {
    const text = yield* Effect.try(() => readFileSync(config.catalogPath, "utf8"))
    const file = yield* Schema.decodeUnknown(Schema.parseJson(CatalogFile))(text)
    credentials.clear()
    for (const entry of file.capabilities) {
      yield* upsertEntry(entry, "seed").pipe(sql.withTransaction)
      for (const p of entry.providers) {
        if (p.auth === undefined) continue
        credentials.set(`${entry.capability.slug}/${p.slug}`, { url: p.url, auth: p.auth })
        const value = yield* Config.option(Config.string(p.auth.env))
        if (Option.isNone(value) || value.value === "") {
          yield* Effect.logWarning(
            `capability provider ${entry.capability.slug}/${p.slug}: ${p.auth.env} is not set; its runs are released (nothing charged) until it is`
          )
        }
      }
    }
    return file.capabilities.length
  }).pipe(Effect.orDie, Effect.withSpan("Capabilities.seed"))

  /**
   * Demo mode upserts the in-process providers (layers/capabilities/DemoProviders.ts); outside
   * it they are deactivated, so a database that once ran the demo lists none that cannot answer.
   */
  const demoProviders = Effect.gen(function*() {
    if (!config.demo) {
      yield* sql`UPDATE capability_providers SET is_active = false, updated_at = now() WHERE url LIKE 'mock://%' AND is_active`
      return
    }
    for (const entry of demoCatalog) yield* upsertEntry(entry, "seed", true).pipe(sql.withTransaction)
  }).pipe(Effect.orDie, Effect.withSpan("Capabilities.demoProviders"))

  /**
   * The credential of a provider the catalog file gives one: `none` without (or for a row moved
   * to another URL), the header when its variable is set, `missing` (with why, for the log) when not.
   */
  const credentialFor = (provider: JoinedRow) =>
    Effect.gen(function*() {
      const entry = credentials.get(`${provider.capability_slug}/${provider.slug}`)
      if (entry === undefined || entry.url !== provider.url) return { _tag: "None" } as const
      const { header, env, scheme } = entry.auth
      const value = yield* Config.option(Config.redacted(env)).pipe(Effect.orDie)
      const secret = Option.match(value, { onNone: () => "", onSome: Redacted.value })
      if (secret === "") return { _tag: "Missing", why: `${env} is not set` } as const
      const headerValue = scheme === undefined ? secret : `${scheme} ${secret}`
      if (!HEADER_VALUE.test(headerValue)) return { _tag: "Missing", why: `${env} holds characters a header cannot carry` } as const
      const credential: Credential = { header, value: headerValue, secret }
      return { _tag: "Header", credential } as const
    })

  return { upsertCatalog, seed, demoProviders, credentialFor } as const
}
