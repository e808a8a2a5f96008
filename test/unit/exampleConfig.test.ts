// gateway.example.yaml, the GATEWAY_CONFIG file the README points newcomers to, stays a valid
// file: it decodes with the schema the start applies, and every model names a declared provider
// (of a kind that embeds, for a model that serves embeddings).
import { Schema } from "effect"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"
import { parse as parseYaml } from "yaml"
import { GatewayConfigFile } from "../../layers/tenancy/ModelCatalog.js"
import { EMBEDDING_KINDS } from "../../schemas/Catalog.js"

const file = fileURLToPath(new URL("../../gateway.example.yaml", import.meta.url))

describe("gateway.example.yaml", () => {
  it("decodes as a GATEWAY_CONFIG file whose models use only its providers", () => {
    const config = Schema.decodeUnknownSync(GatewayConfigFile)(parseYaml(readFileSync(file, "utf8")))
    const providers = new Set(config.providers.map((p) => p.slug))
    expect([...providers]).toEqual(["openai", "openai-responses", "anthropic", "local"])
    expect(config.models.map((m) => m.slug)).toEqual(["gpt-4o-mini", "claude-sonnet-4-5", "fast", "text-embedding-3-small"])
    for (const model of config.models) {
      for (const p of model.providers) {
        expect(providers.has(p.provider), `${model.slug} -> ${p.provider}`).toBe(true)
        const kind = config.providers.find((provider) => provider.slug === p.provider)!.kind
        if (model.serves.includes("embeddings")) expect(EMBEDDING_KINDS, `${model.slug} -> ${p.provider}`).toContain(kind)
      }
    }
  })
})
