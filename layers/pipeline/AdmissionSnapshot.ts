// Everything the five pre-flight checks read, in ONE database round trip: the model's usable
// provider configs for the platform, the platform's settings, the user's rate-limit override,
// live budget and open capability holds, and the platform wallet balance.
import type { PgClient } from "@effect/sql-pg"
import { type BigDecimal, Effect } from "effect"
import type { PlatformSettings } from "../../schemas/Platforms.js"
import { dec } from "../lib/Money.js"
import type { BudgetRow } from "../ledger/BudgetLedger.js"
import { openHoldsSql } from "../ledger/Holds.js"
import type { Candidate } from "./ProviderRouter.js"
import type { ModelOperation } from "../../schemas/Catalog.js"
import type { ProviderKind } from "./upstream/Upstream.js"

export interface AdmissionSnapshot {
  readonly candidates: ReadonlyArray<Candidate>
  readonly settings: PlatformSettings
  readonly override: { readonly rpm: number | null; readonly tpm: number | null; readonly rpd: number | null } | null
  /** The live budget of the end user (none for platform keys). */
  readonly budget: BudgetRow | null
  /** USD held by open capability runs on that budget. */
  readonly held: BigDecimal.BigDecimal
  readonly walletBalance: BigDecimal.BigDecimal
  /** Which of the given pending settlement ids this snapshot already includes (their log rows exist). */
  readonly committed: ReadonlySet<string>
}

interface CandidateJson {
  readonly model_id: string
  readonly model_slug: string
  readonly serves: ReadonlyArray<ModelOperation>
  readonly agent: boolean
  readonly provider_id: string
  readonly provider_slug: string
  readonly kind: ProviderKind
  readonly base_url: string
  readonly provider_model_id: string
  readonly priority: number
  readonly weight: number
  readonly key_encrypted: string
  readonly input: string
  readonly output: string
  readonly cache_read: string | null
  readonly cache_write: string | null
}

interface SnapshotRow {
  readonly settings: PlatformSettings
  readonly wallet_balance: string | null
  readonly has_override: boolean
  readonly rpm_limit: number | null
  readonly tpm_limit: number | null
  readonly rpd_limit: number | null
  readonly held: string | null
  readonly candidates: ReadonlyArray<CandidateJson>
  readonly committed: ReadonlyArray<string>
  readonly b_id: string | null
  readonly b_max_usd: string
  readonly b_used_usd: string
  readonly b_period: BudgetRow["period"]
  readonly b_period_start: Date
  readonly b_period_anchor: Date
  readonly b_auto_replenish: boolean
  readonly b_replenish_amount: string | null
  readonly b_low_balance_threshold: string | null
  readonly b_low_balance_armed: boolean
  readonly b_is_active: boolean
  readonly b_is_suspended: boolean
  readonly b_max_display: string | null
  readonly b_used_display: string
  readonly b_created_at: Date
  readonly b_updated_at: Date
}

export const loadAdmissionSnapshot = (
  sql: PgClient.PgClient,
  reveal: (sealed: string) => string,
  platformId: string,
  endUserId: string | null,
  modelSlug: string,
  pendingIds: ReadonlyArray<string>
) =>
  sql<SnapshotRow>`SELECT p.settings,
      (SELECT w.balance_usd::text FROM platform_wallets w WHERE w.platform_id = p.id) AS wallet_balance,
      o.end_user_id IS NOT NULL AS has_override, o.rpm_limit, o.tpm_limit, o.rpd_limit,
      ${openHoldsSql(sql, sql`b.id`)}::text AS held,
      (SELECT coalesce(json_agg(json_build_object(
          'model_id', m.id, 'model_slug', m.slug, 'serves', m.serves, 'agent', m.agent, 'provider_id', pr.id, 'provider_slug', pr.slug, 'kind', pr.kind, 'base_url', pr.base_url,
          'provider_model_id', mp.provider_model_id, 'priority', mp.priority, 'weight', mp.weight,
          'key_encrypted', k.key_encrypted, 'input', mp.input_usd_per_mtok::text, 'output', mp.output_usd_per_mtok::text,
          'cache_read', mp.cache_read_usd_per_mtok::text, 'cache_write', mp.cache_write_usd_per_mtok::text)), '[]'::json)
        FROM models m
        JOIN model_providers mp ON mp.model_id = m.id AND mp.enabled
        JOIN providers pr ON pr.id = mp.provider_id
        JOIN platform_provider_keys k ON k.provider_id = pr.id AND k.platform_id = p.id AND k.is_active
        -- The model by its slug, else by one of its aliases (the second lookup runs only when the first finds none).
        WHERE m.id = coalesce((SELECT s.id FROM models s WHERE s.slug = ${modelSlug}),
          (SELECT a.model_id FROM model_aliases a WHERE a.alias = ${modelSlug}))) AS candidates,
      (SELECT coalesce(array_agg(l.id::text), '{}') FROM inference_logs l
        WHERE l.id = ANY(${`{${pendingIds.join(",")}}`}::uuid[])) AS committed,
      b.id AS b_id, b.max_usd AS b_max_usd, b.used_usd AS b_used_usd, b.period AS b_period,
      b.period_start AS b_period_start, b.period_anchor AS b_period_anchor, b.auto_replenish AS b_auto_replenish,
      b.replenish_amount AS b_replenish_amount, b.low_balance_threshold AS b_low_balance_threshold,
      b.low_balance_armed AS b_low_balance_armed, b.is_active AS b_is_active, b.is_suspended AS b_is_suspended,
      b.max_display AS b_max_display, b.used_display AS b_used_display, b.created_at AS b_created_at,
      b.updated_at AS b_updated_at
    FROM platforms p
    LEFT JOIN end_user_rate_limits o ON o.end_user_id = ${endUserId} AND o.platform_id = p.id
    LEFT JOIN budgets b ON b.end_user_id = ${endUserId} AND b.platform_id = p.id AND b.deleted_at IS NULL
    WHERE p.id = ${platformId}`.pipe(
    Effect.map(([row]): AdmissionSnapshot => {
      if (row === undefined) {
        return { candidates: [], settings: {}, override: null, budget: null, held: dec("0"), walletBalance: dec("0"), committed: new Set() }
      }
      const budget: BudgetRow | null = row.b_id === null || endUserId === null ? null : {
        id: row.b_id,
        platform_id: platformId,
        end_user_id: endUserId,
        max_usd: row.b_max_usd,
        used_usd: row.b_used_usd,
        period: row.b_period,
        period_start: row.b_period_start,
        period_anchor: row.b_period_anchor,
        auto_replenish: row.b_auto_replenish,
        replenish_amount: row.b_replenish_amount,
        low_balance_threshold: row.b_low_balance_threshold,
        low_balance_armed: row.b_low_balance_armed,
        is_active: row.b_is_active,
        is_suspended: row.b_is_suspended,
        max_display: row.b_max_display,
        used_display: row.b_used_display,
        created_at: row.b_created_at,
        updated_at: row.b_updated_at
      }
      return {
        candidates: row.candidates.map((c): Candidate => ({
          modelId: c.model_id,
          modelSlug: c.model_slug,
          serves: c.serves,
          agent: c.agent,
          providerId: c.provider_id,
          providerSlug: c.provider_slug,
          kind: c.kind,
          baseUrl: c.base_url,
          providerModelId: c.provider_model_id,
          priority: c.priority,
          weight: c.weight,
          apiKey: reveal(c.key_encrypted),
          inputUsdPerMtok: dec(c.input),
          outputUsdPerMtok: dec(c.output),
          cacheReadUsdPerMtok: c.cache_read === null ? null : dec(c.cache_read),
          cacheWriteUsdPerMtok: c.cache_write === null ? null : dec(c.cache_write)
        })),
        settings: row.settings,
        override: row.has_override ? { rpm: row.rpm_limit, tpm: row.tpm_limit, rpd: row.rpd_limit } : null,
        budget,
        held: dec(row.held ?? "0"),
        walletBalance: dec(row.wallet_balance ?? "0"),
        committed: new Set(row.committed)
      }
    }),
    Effect.orDie
  )
