// The adapter for each provider kind, as a plain lookup (`adapterFor`) and as a swappable
// service (`UpstreamAdapters`) so gateway tests can replace real providers with fakes or the mock.
import { Context, Layer } from "effect"
import { AnthropicAdapter } from "./Anthropic.js"
import { MockAdapter } from "./Mock.js"
import { OpenAiAdapter } from "./OpenAi.js"
import { OpenAiResponsesAdapter } from "./OpenAiResponses.js"
import type { ProviderKind, UpstreamAdapter } from "./Upstream.js"

const adapters: Readonly<Record<ProviderKind, UpstreamAdapter>> = {
  openai: OpenAiAdapter,
  "openai-responses": OpenAiResponsesAdapter,
  anthropic: AnthropicAdapter,
  mock: MockAdapter
}

export const adapterFor = (kind: ProviderKind): UpstreamAdapter => adapters[kind]

export class UpstreamAdapters extends Context.Tag("gateway/UpstreamAdapters")<UpstreamAdapters, {
  readonly get: (kind: ProviderKind) => UpstreamAdapter
}>() {
  /** The real adapters (HTTP for openai/openai-responses/anthropic, offline for mock). */
  static readonly layer = Layer.succeed(UpstreamAdapters, { get: adapterFor })
  /** Overrides some kinds (e.g. `{ openai: MockAdapter }`), the rest stay real. */
  static readonly layerWith = (overrides: Partial<Record<ProviderKind, UpstreamAdapter>>) =>
    Layer.succeed(UpstreamAdapters, { get: (kind) => overrides[kind] ?? adapterFor(kind) })
}
