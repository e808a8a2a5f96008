// ModelCatalog: providers, models and their provider configurations. The operator manages
// them over the admin API or a GATEWAY_CONFIG file applied idempotently at start.
import { PgClient } from "@effect/sql-pg"
import { Config, Effect, Option, Schema } from "effect"
import { readFileSync } from "node:fs"
import { parse as parseYaml } from "yaml"
import { EMBEDDING_KINDS, type ModelConfig, ModelInput, type ModelOperation, ProviderInput } from "../../schemas/Catalog.js"
import { ValidationError } from "../../schemas/Errors.js"
import { dec, sqlDec } from "../lib/Money.js"
import { isUniqueViolation } from "../lib/SqlErrors.js"

interface ProviderRow {
  readonly id: string
  readonly slug: string
  readonly kind: ProviderInput["kind"]
  readonly base_url: string
  readonly created_at: Date
  readonly updated_at: Date
}

interface ConfigRow {
  readonly model_id: string
  readonly model_slug: string
  readonly model_serves: ReadonlyArray<ModelOperation>
  readonly model_agent: boolean
  readonly model_aliases: ReadonlyArray<string>
  readonly model_created_at: Date
  readonly provider: string | null
  readonly provider_model_id: string | null
  readonly priority: number | null
  readonly weight: number | null
  readonly enabled: boolean | null
  readonly input_usd_per_mtok: string | null
  readonly output_usd_per_mtok: string | null
  readonly cache_read_usd_per_mtok: string | null
  readonly cache_write_usd_per_mtok: string | null
}

/** The GATEWAY_CONFIG file: the admin endpoints' bodies, as YAML or JSON. */
export const GatewayConfigFile = Schema.Struct({
  providers: Schema.optionalWith(Schema.Array(ProviderInput), { default: () => [] }),
  models: Schema.optionalWith(Schema.Array(ModelInput), { default: () => [] })
})

const toModelConfigs = (rows: ReadonlyArray<ConfigRow>): Array<ModelConfig> => {
  const bySlug = new Map<
    string,
    {
      id: string
      slug: string
      serves: ReadonlyArray<ModelOperation>
      agent: boolean
      aliases: ReadonlyArray<string>
      created_at: Date
      providers: Array<ModelConfig["providers"][number]>
    }
  >()
  for (const row of rows) {
    const model = bySlug.get(row.model_slug) ??
      {
        id: row.model_id,
        slug: row.model_slug,
        serves: row.model_serves,
        agent: row.model_agent,
        aliases: row.model_aliases,
        created_at: row.model_created_at,
        providers: []
      }
    bySlug.set(row.model_slug, model)
    if (row.provider !== null) {
      model.providers.push({
        provider: row.provider,
        provider_model_id: row.provider_model_id!,
        priority: row.priority!,
        weight: row.weight!,
        enabled: row.enabled!,
        input_usd_per_mtok: dec(row.input_usd_per_mtok!),
        output_usd_per_mtok: dec(row.output_usd_per_mtok!),
        cache_read_usd_per_mtok: row.cache_read_usd_per_mtok === null ? null : dec(row.cache_read_usd_per_mtok),
        cache_write_usd_per_mtok: row.cache_write_usd_per_mtok === null ? null : dec(row.cache_write_usd_per_mtok)
      })
    }
  }
  return [...bySlug.values()]
}

export class ModelCatalog extends Effect.Service<ModelCatalog>()("gateway/ModelCatalog", {
  effect: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient

    /** Creates or replaces a provider by slug. */
    const upsertProvider = (input: ProviderInput) =>
      sql<ProviderRow>`INSERT INTO providers (slug, kind, base_url) VALUES (${input.slug}, ${input.kind}, ${input.base_url})
        ON CONFLICT (slug) DO UPDATE SET kind = excluded.kind, base_url = excluded.base_url, updated_at = now()
        RETURNING *`.pipe(Effect.map((rows) => rows[0]!), Effect.orDie)

    const listProviders = sql<ProviderRow>`SELECT * FROM providers ORDER BY slug`.pipe(Effect.orDie)

    const modelConfigs = (slug: string | undefined) =>
      sql<ConfigRow>`SELECT m.id AS model_id, m.slug AS model_slug, m.serves AS model_serves, m.agent AS model_agent,
          m.created_at AS model_created_at,
          ARRAY(SELECT a.alias FROM model_aliases a WHERE a.model_id = m.id ORDER BY a.alias) AS model_aliases,
          p.slug AS provider, mp.provider_model_id, mp.priority, mp.weight, mp.enabled,
          mp.input_usd_per_mtok::text, mp.output_usd_per_mtok::text,
          mp.cache_read_usd_per_mtok::text, mp.cache_write_usd_per_mtok::text
        FROM models m LEFT JOIN model_providers mp ON mp.model_id = m.id LEFT JOIN providers p ON p.id = mp.provider_id
        ${slug === undefined ? sql`` : sql`WHERE m.slug = ${slug}`}
        ORDER BY m.slug, mp.priority, p.slug`.pipe(Effect.map(toModelConfigs), Effect.orDie)

    /** Creates or replaces a model and its whole provider list (declarative). */
    const upsertModel = (input: ModelInput) =>
      Effect.gen(function*() {
        const slugs = input.providers.map((p) => p.provider)
        const known = slugs.length === 0
          ? []
          : yield* sql<{ id: string; slug: string; kind: ProviderInput["kind"] }>`SELECT id, slug, kind FROM providers WHERE slug IN ${sql.in(slugs)}`
        const ids = new Map(known.map((p) => [p.slug, p.id]))
        const missing = slugs.find((s) => !ids.has(s))
        if (missing !== undefined) {
          return yield* new ValidationError({ code: "validation_error", param: "providers", message: `Unknown provider: ${missing}` })
        }
        if (new Set(slugs).size !== slugs.length) {
          return yield* new ValidationError({ code: "validation_error", param: "providers", message: "A provider is listed twice" })
        }
        // Only some adapters can embed: an embeddings model of another kind could never be served.
        const cannotEmbed = input.serves.includes("embeddings") ? known.find((p) => !EMBEDDING_KINDS.includes(p.kind)) : undefined
        if (cannotEmbed !== undefined) {
          return yield* new ValidationError({
            code: "validation_error",
            param: "providers",
            message: `Provider ${cannotEmbed.slug} (kind ${cannotEmbed.kind}) cannot serve embeddings; kinds that can: ${EMBEDDING_KINDS.join(", ")}`
          })
        }
        // The agent loop is a Responses API loop: a model that serves no chat could never run it.
        if (input.agent && !input.serves.includes("chat")) {
          return yield* new ValidationError({ code: "validation_error", param: "agent", message: "An agent model must serve chat" })
        }
        // A name resolves to one model: an alias is no other model's slug or alias, a slug no other model's alias.
        const taken = yield* sql<{ name: string }>`SELECT a.alias AS name FROM model_aliases a JOIN models m ON m.id = a.model_id
            WHERE m.slug <> ${input.slug} AND (a.alias = ${input.slug} ${input.aliases.length === 0 ? sql`` : sql`OR a.alias IN ${sql.in(input.aliases)}`})
          ${input.aliases.length === 0 ? sql`` : sql`UNION ALL SELECT slug AS name FROM models WHERE slug IN ${sql.in(input.aliases)}`}
          LIMIT 1`
        if (taken[0] !== undefined) {
          return yield* new ValidationError({
            code: "validation_error",
            param: "aliases",
            message: `The name ${taken[0].name} already names another model (as its slug or alias)`
          })
        }
        const [model] = yield* sql<{ id: string }>`INSERT INTO models (slug, serves, agent)
          VALUES (${input.slug}, ${`{${input.serves.join(",")}}`}::text[], ${input.agent})
          ON CONFLICT (slug) DO UPDATE SET serves = excluded.serves, agent = excluded.agent RETURNING id`
        yield* sql`DELETE FROM model_providers WHERE model_id = ${model!.id}`
        for (const p of input.providers) {
          yield* sql`INSERT INTO model_providers (model_id, provider_id, provider_model_id, priority, weight, enabled,
              input_usd_per_mtok, output_usd_per_mtok, cache_read_usd_per_mtok, cache_write_usd_per_mtok)
            VALUES (${model!.id}, ${ids.get(p.provider)!}, ${p.provider_model_id}, ${p.priority}, ${p.weight}, ${p.enabled},
              ${sqlDec(p.input_usd_per_mtok)}, ${sqlDec(p.output_usd_per_mtok)},
              ${p.cache_read_usd_per_mtok === null ? null : sqlDec(p.cache_read_usd_per_mtok)}::numeric,
              ${p.cache_write_usd_per_mtok === null ? null : sqlDec(p.cache_write_usd_per_mtok)}::numeric)`
        }
        yield* sql`DELETE FROM model_aliases WHERE model_id = ${model!.id}`
        for (const alias of input.aliases) yield* sql`INSERT INTO model_aliases (alias, model_id) VALUES (${alias}, ${model!.id})`
        return (yield* modelConfigs(input.slug))[0]!
      }).pipe(
        sql.withTransaction,
        // Two upserts racing for one alias: the primary key refuses the second.
        Effect.catchTag("SqlError", (e) =>
          isUniqueViolation(e)
            ? new ValidationError({ code: "validation_error", param: "aliases", message: "An alias already names another model" })
            : Effect.die(e))
      )

    const listModels = modelConfigs(undefined)

    /**
     * GET /v1/models for a platform: models with an enabled config whose provider has an active
     * key for the platform; owned_by is the provider of the lowest priority value among them.
     */
    const visibleModels = (platformId: string, slug?: string) =>
      sql<{ slug: string; created_at: Date; owned_by: string }>`SELECT DISTINCT ON (m.slug) m.slug, m.created_at, p.slug AS owned_by
        FROM models m
        JOIN model_providers mp ON mp.model_id = m.id AND mp.enabled
        JOIN providers p ON p.id = mp.provider_id
        JOIN platform_provider_keys k ON k.provider_id = p.id AND k.platform_id = ${platformId} AND k.is_active
        ${slug === undefined ? sql`` : sql`WHERE m.slug = ${slug} OR m.id IN (SELECT a.model_id FROM model_aliases a WHERE a.alias = ${slug})`}
        ORDER BY m.slug, mp.priority, p.slug`.pipe(Effect.orDie)

    /** GET /v1/models/{model}: the model when the platform may call it (the list's rule), by slug or alias. */
    const visibleModel = (platformId: string, slug: string) =>
      Effect.map(visibleModels(platformId, slug), (rows) => Option.fromNullable(rows[0]))

    /** Applies GATEWAY_CONFIG (YAML or JSON) when set; repeating it changes nothing. */
    const applyConfigFile = Effect.gen(function*() {
      const path = yield* Config.option(Config.string("GATEWAY_CONFIG"))
      if (Option.isNone(path)) return
      const text = readFileSync(path.value, "utf8")
      const file = yield* Schema.decodeUnknown(GatewayConfigFile)(parseYaml(text))
      for (const provider of file.providers) yield* upsertProvider(provider)
      for (const model of file.models) yield* upsertModel(model)
      yield* Effect.logInfo(`GATEWAY_CONFIG applied: ${file.providers.length} providers, ${file.models.length} models`)
    }).pipe(Effect.orDie)

    return { upsertProvider, listProviders, upsertModel, listModels, visibleModels, visibleModel, applyConfigFile } as const
  })
}) {}
