// The adapter for each provider kind, as a plain lookup (`adapterFor`, default limits) and as a
// swappable service (`UpstreamAdapters`, limits from the environment) so gateway tests can
// replace real providers with fakes or the mock.
import { Context, Effect, Layer } from "effect"
import { makeAnthropicAdapter } from "./Anthropic.js"
import { defaultUpstreamLimits, type UpstreamLimits, upstreamLimitsConfig } from "./Limits.js"
import { MockAdapter } from "./Mock.js"
import { makeOpenAiAdapter } from "./OpenAi.js"
import { makeOpenAiResponsesAdapter } from "./OpenAiResponses.js"
import type { ProviderKind, UpstreamAdapter } from "./Upstream.js"

/** Every kind's adapter, built once for the given limits. */
export const adaptersWith = (limits: UpstreamLimits): Readonly<Record<ProviderKind, UpstreamAdapter>> => ({
  openai: makeOpenAiAdapter(limits),
  "openai-responses": makeOpenAiResponsesAdapter(limits),
  anthropic: makeAnthropicAdapter(limits),
  mock: MockAdapter
})

const defaultAdapters = adaptersWith(defaultUpstreamLimits)

export const adapterFor = (kind: ProviderKind): UpstreamAdapter => defaultAdapters[kind]

export class UpstreamAdapters extends Context.Tag("gateway/UpstreamAdapters")<UpstreamAdapters, {
  readonly get: (kind: ProviderKind) => UpstreamAdapter
}>() {
  /** The real adapters (HTTP for openai/openai-responses/anthropic, offline for mock), within the configured limits. */
  static readonly layer = Layer.effect(
    UpstreamAdapters,
    Effect.map(upstreamLimitsConfig, (limits) => {
      const adapters = adaptersWith(limits)
      return { get: (kind: ProviderKind) => adapters[kind] }
    })
  )
  /** Tests: `adapter` serves every kind (a fake provider; nothing goes over the network). */
  static readonly test = (adapter: UpstreamAdapter): Layer.Layer<UpstreamAdapters> =>
    Layer.succeed(UpstreamAdapters, { get: () => adapter })
  /** Overrides some kinds (e.g. `{ openai: MockAdapter }`), the rest stay real. */
  static readonly layerWith = (overrides: Partial<Record<ProviderKind, UpstreamAdapter>>) =>
    Layer.effect(
      UpstreamAdapters,
      Effect.map(upstreamLimitsConfig, (limits) => {
        const adapters = adaptersWith(limits)
        return { get: (kind: ProviderKind) => overrides[kind] ?? adapters[kind] }
      })
    )
}
