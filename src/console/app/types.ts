// The API's wire shapes as the console reads them (schemas/*.ts on the server). Money is a
// decimal string here: parseJson keeps it exact.
export type Dec = string

export interface Platform {
  readonly id: string
  readonly name: string
  readonly settings: Record<string, unknown> & {
    readonly capabilities?: {
      readonly enabled?: boolean
      readonly max_price_usd?: Dec | null
      readonly allowlist?: ReadonlyArray<string> | null
      readonly denylist?: ReadonlyArray<string>
      readonly charge_failed_calls?: boolean
    }
  }
  readonly skills_enabled: boolean
  readonly created_at: string
}

export interface EndUser {
  readonly id: string
  readonly external_id: string
  readonly display_name: string
  readonly is_active: boolean
  readonly created_at: string
}

export interface ApiKey {
  readonly id: string
  readonly end_user_id?: string
  readonly key_prefix: string
  readonly name: string
  readonly scopes: ReadonlyArray<string>
  readonly is_active: boolean
  readonly last_used_at?: string | null
  readonly expires_at: string | null
  readonly created_at: string
}

export interface ApiKeyCreated extends ApiKey {
  readonly raw_key: string
}

export interface Budget {
  readonly id: string
  readonly max_usd: Dec
  readonly used_usd: Dec
  readonly remaining_usd: Dec
  readonly reserved_usd?: Dec
  readonly period: "one_time" | "daily" | "monthly"
  readonly period_start: string
  readonly auto_replenish: boolean
  readonly replenish_amount: Dec | null
  readonly low_balance_threshold: Dec | null
  readonly is_active: boolean
  readonly is_suspended: boolean
}

export interface BudgetTransaction {
  readonly id: string
  readonly type: string
  readonly amount_usd: Dec
  readonly max_usd_after: Dec
  readonly used_usd_after: Dec
  readonly reason: string | null
  readonly actor_type: string
  readonly created_at: string
}

export interface WalletView {
  readonly usd_ledger: { readonly max_usd: Dec; readonly used_usd: Dec; readonly remaining_usd: Dec }
  readonly display_ledger: null | {
    readonly unit: string
    readonly max: Dec
    readonly used: Dec
    readonly remaining: Dec
    readonly active_rules: ReadonlyArray<{ readonly trigger: string; readonly amount: Dec }>
  }
}

export interface RateLimits {
  readonly rpm_limit: number | null
  readonly tpm_limit: number | null
  readonly rpd_limit: number | null
  readonly resolution: "explicit" | "default" | "none"
}

export interface LogEntry {
  readonly id: string
  readonly end_user_id: string | null
  readonly request_type: string
  readonly provider_id: string | null
  readonly model_id: string | null
  readonly model: string | null
  readonly provider: string | null
  readonly provider_model_id: string | null
  readonly prompt_tokens: number
  readonly completion_tokens: number
  readonly total_tokens: number
  readonly latency_ms: number
  readonly estimated_cost_usd: Dec
  readonly status: string
  readonly error_message: string | null
  readonly token_count_method: string
  readonly billing_status: string
  readonly metadata: Record<string, unknown>
  readonly created_at: string
}

export interface UsageBucket {
  readonly key: string
  readonly external_id?: string | null
  readonly calls: number
  readonly errors: number
  readonly input_tokens: number
  readonly output_tokens: number
  readonly cost_usd: Dec
}

export interface Usage {
  readonly object: "usage"
  readonly from: string
  readonly to: string
  readonly group_by: string
  readonly data: ReadonlyArray<UsageBucket>
  readonly totals: Omit<UsageBucket, "key" | "external_id">
}

export interface PlatformWallet {
  readonly balance_usd: Dec
  readonly updated_at: string
}

export interface WebhookEndpoint {
  readonly id: string
  readonly url: string
  readonly event_types: ReadonlyArray<string>
  readonly is_active: boolean
  readonly created_at: string
}

export interface WebhookDelivery {
  readonly id: string
  readonly event_id: string
  readonly event_type: string
  readonly status: string
  readonly http_status: number | null
  readonly attempt: number
  readonly next_attempt_at: string | null
  readonly last_error: string | null
  readonly created_at: string
}

export interface WebhookAttempt {
  readonly id: string
  readonly attempt: number
  readonly status: string
  readonly http_status: number | null
  readonly error: string | null
  readonly next_attempt_at: string | null
  readonly created_at: string
}

export interface ProviderKey {
  readonly provider: string
  readonly key_hint: string
  readonly is_active: boolean
  readonly updated_at: string
}

export interface Provider {
  readonly id: string
  readonly slug: string
  readonly kind: string
  readonly base_url: string
}

export interface ModelConfig {
  readonly id: string
  readonly slug: string
  readonly serves: ReadonlyArray<string>
  readonly agent: boolean
  readonly providers: ReadonlyArray<{
    readonly provider: string
    readonly provider_model_id: string
    readonly priority: number
    readonly weight: number
    readonly enabled: boolean
    readonly input_usd_per_mtok: Dec
    readonly output_usd_per_mtok: Dec
  }>
}

export interface CapabilitySummary {
  readonly slug: string
  readonly name: string
  readonly provider_count: number
  readonly in_policy_count: number
  readonly min_price_usd: Dec | null
}
