// The gateway the Responses API tests run against: one model per upstream kind (mock-echo on the
// built-in mock, gpt-fake on a fake OpenAI, claude-fake on a fake Anthropic, resp-fake on a fake
// OpenAI Responses upstream), and tenants whose end user has a budget, the platform a wallet and
// a key for every provider.
import OpenAI from "openai"
import { startFakeAnthropic } from "../fakes/FakeAnthropic.js"
import { type FakeUpstream, startFakeOpenAi } from "../fakes/FakeOpenAi.js"
import { startFakeOpenAiResponses } from "../fakes/FakeOpenAiResponses.js"
import { createEndUser, createPlatform, type Gateway, startGateway } from "./Gateway.js"

export interface ResponsesWorld {
  readonly gw: Gateway
  readonly oa: FakeUpstream
  readonly anth: FakeUpstream
  readonly resp: FakeUpstream
  readonly close: () => Promise<void>
}

export interface ResponsesTenant {
  readonly platformId: string
  readonly platformKey: string
  readonly endUserId: string
  readonly endUserKey: string
  readonly client: OpenAI
}

export const startResponsesWorld = async (): Promise<ResponsesWorld> => {
  const [oa, anth, resp] = await Promise.all([startFakeOpenAi(), startFakeAnthropic(), startFakeOpenAiResponses()])
  const gw = await startGateway()
  const admin = (path: string, body: unknown) => gw.call("POST", path, { key: gw.adminKey, body })
  const price = { input_usd_per_mtok: 1, output_usd_per_mtok: 2 }
  await admin("/v1/admin/providers", { slug: "mock", kind: "mock", base_url: "http://mock.invalid" })
  await admin("/v1/admin/providers", { slug: "oa", kind: "openai", base_url: oa.url })
  await admin("/v1/admin/providers", { slug: "anth", kind: "anthropic", base_url: anth.url })
  await admin("/v1/admin/providers", { slug: "resp", kind: "openai-responses", base_url: resp.url })
  await admin("/v1/admin/models", { slug: "mock-echo", providers: [{ provider: "mock", provider_model_id: "echo", ...price }] })
  await admin("/v1/admin/models", { slug: "gpt-fake", providers: [{ provider: "oa", provider_model_id: "gpt-x", ...price }] })
  await admin("/v1/admin/models", { slug: "claude-fake", providers: [{ provider: "anth", provider_model_id: "claude-x", ...price }] })
  await admin("/v1/admin/models", { slug: "resp-fake", providers: [{ provider: "resp", provider_model_id: "r-x", ...price }] })
  return {
    gw,
    oa,
    anth,
    resp,
    close: async () => {
      await gw.close()
      await Promise.all([oa, anth, resp].map((f) => f.close()))
    }
  }
}

/** A platform with a 10 USD wallet and every provider's key, and one end user with `budget`. */
export const responsesTenant = async (
  gw: Gateway,
  externalId: string,
  budget: Record<string, unknown> = { max_usd: 5 }
): Promise<ResponsesTenant> => {
  const { platformId, platformKey } = await createPlatform(gw)
  for (const slug of ["mock", "oa", "anth", "resp"]) {
    await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/${slug}`, { key: platformKey, body: { api_key: `k-${slug}` } })
  }
  await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } })
  const eu = await createEndUser(gw, platformId, platformKey, externalId)
  await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: budget })
  return { platformId, platformKey, ...eu, client: new OpenAI({ apiKey: eu.endUserKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 }) }
}
