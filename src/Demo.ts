// Demo mode (GATEWAY_DEMO, on by default with the embedded database): a demo platform with an
// end user, the offline `mock` provider with models `mock-echo`, `mock-tools` and `mock-embed`, the in-process
// capability provider `demo-search`, and a prepaid wallet. The raw keys are kept in the data dir
// so every start can print them again.
import { SqlClient } from "@effect/sql"
import { BigDecimal, Effect, Option, Schema } from "effect"
import { existsSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { dataDir } from "../layers/platform/EmbeddedPostgres.js"
import { EndUsers } from "../layers/tenancy/EndUsers.js"
import { hashKey } from "../layers/access/KeyFormat.js"
import { ModelCatalog } from "../layers/tenancy/ModelCatalog.js"
import type { ModelInput } from "../schemas/Catalog.js"
import { PlatformWallet } from "../layers/ledger/PlatformWallet.js"
import { ProviderKeys } from "../layers/tenancy/ProviderKeys.js"
import { Platforms } from "../layers/tenancy/Platforms.js"

const DemoFile = Schema.Struct({ platform_id: Schema.String, platform_key: Schema.String, end_user_key: Schema.String })
export type DemoKeys = typeof DemoFile.Type

export { demoEnabled } from "../layers/lib/DemoMode.js"

/** A model served by the offline `mock` provider at the demo prices. */
const mockModel = (slug: string, providerModelId: string, serves: ModelInput["serves"] = ["chat"], aliases: ReadonlyArray<string> = []) => ({
  slug,
  serves,
  agent: false,
  aliases,
  providers: [{
    provider: "mock",
    provider_model_id: providerModelId,
    priority: 0,
    weight: 1,
    enabled: true,
    input_usd_per_mtok: BigDecimal.unsafeFromString("0.5"),
    output_usd_per_mtok: BigDecimal.unsafeFromString("1.5"),
    cache_read_usd_per_mtok: null,
    cache_write_usd_per_mtok: null
  }]
})

/**
 * The Anthropic model ids Claude Code sends by default: in the demo they name `mock-echo`, so
 * Claude Code pointed at the demo gets answers (echoes) without configuring a model.
 */
const CLAUDE_CODE_MODELS = [
  "claude-sonnet-4-5",
  "claude-sonnet-4-5-20250929",
  "claude-haiku-4-5",
  "claude-haiku-4-5-20251001",
  "claude-opus-4-1",
  "claude-opus-4-1-20250805",
  "claude-3-5-haiku-20241022"
]

/**
 * The offline `mock` provider with `mock-echo` (echoes; also called by the Claude model ids in
 * CLAUDE_CODE_MODELS), `mock-tools` (calls the tools it is
 * offered) and `mock-embed` (deterministic embeddings; layers/pipeline/upstream/Mock.ts);
 * idempotent: upserts. The capability provider `demo-search`
 * is seeded by Capabilities itself in demo mode (layers/capabilities/DemoProviders.ts).
 */
const seedMockModels = Effect.gen(function*() {
  const catalog = yield* ModelCatalog
  yield* catalog.upsertProvider({ slug: "mock", kind: "mock", base_url: "http://mock.invalid" })
  // A demo database whose operator gave one of those ids to a model of theirs keeps it theirs.
  yield* catalog.upsertModel(mockModel("mock-echo", "mock-echo-1", ["chat"], CLAUDE_CODE_MODELS)).pipe(
    Effect.catchTag("ValidationError", (e) =>
      Effect.zipRight(Effect.logWarning(`mock-echo seeded without Claude's model ids: ${e.message}`), catalog.upsertModel(mockModel("mock-echo", "mock-echo-1"))))
  )
  yield* catalog.upsertModel(mockModel("mock-tools", "mock-tools-1"))
  yield* catalog.upsertModel(mockModel("mock-embed", "mock-embed-1", ["embeddings"]))
})

/** Returns the demo keys, creating the demo platform and user when they are missing. */
export const seedDemo = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const platforms = yield* Platforms
  const endUsers = yield* EndUsers
  const file = join(yield* dataDir, "demo-keys.json")
  yield* seedMockModels

  if (existsSync(file)) {
    const saved = yield* Schema.decodeUnknown(Schema.parseJson(DemoFile))(readFileSync(file, "utf8")).pipe(Effect.option)
    if (Option.isSome(saved)) {
      const hashes = [hashKey(saved.value.platform_key), hashKey(saved.value.end_user_key)]
      const live = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM api_keys
        WHERE key_hash IN (${hashes[0]!}, ${hashes[1]!}) AND is_active AND deleted_at IS NULL`
      if (live[0]?.n === 2) return saved.value
    }
  }

  const created = yield* platforms.create({ name: "Demo platform", settings: { default_budget_usd: 10 } })
  const user = yield* endUsers.create(
    created.platform.id,
    { external_id: "demo-user", display_name: "Demo user" },
    { type: "platform_key", keyId: created.api_key.id }
  )
  // The demo platform may use the mock provider and has a prepaid wallet to spend.
  yield* (yield* ProviderKeys).put(created.platform.id, "mock", "mock-key")
  yield* (yield* PlatformWallet).topup(created.platform.id, BigDecimal.unsafeFromString("100"), "demo credit")
  const keys: DemoKeys = {
    platform_id: created.platform.id,
    platform_key: created.api_key.raw_key,
    end_user_key: user.apiKey.raw_key
  }
  writeFileSync(file, JSON.stringify(keys, null, 2) + "\n", { mode: 0o600 })
  return keys
})
