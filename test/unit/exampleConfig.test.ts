// gateway.example.yaml, the GATEWAY_CONFIG file the README points newcomers to, stays a valid
// file: it decodes with the schema the start applies, and every model names a declared provider.
import { Schema } from "effect"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"
import { parse as parseYaml } from "yaml"
import { GatewayConfigFile } from "../../layers/tenancy/ModelCatalog.js"

const file = fileURLToPath(new URL("../../gateway.example.yaml", import.meta.url))

describe("gateway.example.yaml", () => {
  it("decodes as a GATEWAY_CONFIG file whose models use only its providers", () => {
    const config = Schema.decodeUnknownSync(GatewayConfigFile)(parseYaml(readFileSync(file, "utf8")))
    const providers = new Set(config.providers.map((p) => p.slug))
    expect([...providers]).toEqual(["openai", "openai-responses", "anthropic", "local"])
    expect(config.models.map((m) => m.slug)).toEqual(["gpt-4o-mini", "claude-sonnet-4-5", "fast"])
    for (const model of config.models) {
      for (const p of model.providers) expect(providers.has(p.provider), `${model.slug} -> ${p.provider}`).toBe(true)
    }
  })
})
