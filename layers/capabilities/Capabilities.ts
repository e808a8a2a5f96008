// Capabilities: the paid-provider catalog (seeded from catalog/capabilities.json at start), the
// per-platform policy, full-text search, and runs: hold on the budget, one provider call, then
// one settlement transaction (budget debit row, platform wallet debit, `capability` log row).
// The catalog's seeding, upserts and credentials are in CatalogSeed.ts, the policy in Policy.ts,
// the rows and prices in Rows.ts, the outcome-to-final-state rule in Settlement.ts.
import { PgClient } from "@effect/sql-pg"
import { BigDecimal, Clock, Config, Duration, Effect, Option, Schedule } from "effect"
import {
  type CapabilityDetail,
  type CapabilityList,
  type CapabilityShelf,
  PROVIDER_LIST_CAP,
  type ProviderFilter,
  type RunRequest,
  type RunResponse,
  type SearchResponse
} from "../../schemas/Capabilities.js"
import { Forbidden, NotFound, PaymentRequired } from "../../schemas/Errors.js"
import { isUuid } from "../lib/Ids.js"
import { dec, sqlDec } from "../lib/Money.js"
import { isQueryCanceled } from "../lib/SqlErrors.js"
import { demoEnabled } from "../lib/DemoMode.js"
import { allowPrivateUrls } from "../lib/SsrfGuard.js"
import { AdmissionCache } from "../pipeline/AdmissionCache.js"
import { actorOf, BudgetLedger, type BudgetRow } from "../ledger/BudgetLedger.js"
import { insertLogRow, NOT_A_MODEL_CALL } from "../ledger/InferenceLogs.js"
import { catalogPathConfig, makeCatalog } from "./CatalogSeed.js"
import { capabilityTiming, policyOf, policyStateOf, toProvider } from "./Policy.js"
import { callProvider } from "./ProviderCall.js"
import {
  byCost,
  byRating,
  type CapabilityRow,
  type JoinedRow,
  price,
  providerColumnsOf,
  type ProviderRow,
  quotedPrice,
  rating,
  reservePrice,
  uidOf,
  ZERO
} from "./Rows.js"
import { type Settlement, settlementOf } from "./Settlement.js"
import { heldOnBudgetSql, platformOpenHoldsUsd } from "../ledger/Holds.js"
import type { EndUserPrincipal, Principal } from "../access/KeyAuth.js"
import { PlatformWallet } from "../ledger/PlatformWallet.js"

export { openHoldsSql } from "../ledger/Holds.js"
export { capabilityTiming, type Policy, policyOf, policyStateOf } from "./Policy.js"
export { uidOf } from "./Rows.js"

const notFound = new NotFound({ code: "not_found", message: "No such capability" })
const noProvider = new NotFound({ code: "not_found", param: "capability", message: "No such capability provider (uid)" })

/** A credentialed provider whose variable is unset is not called: a call without it would be a failure billed to the user. */
const CREDENTIAL_MISSING = "the gateway has no credential configured for this provider (its operator's log names the variable); it was not called"

// --- the service ------------------------------------------------------------------------------

export class Capabilities extends Effect.Service<Capabilities>()("gateway/Capabilities", {
  dependencies: [AdmissionCache.Default, BudgetLedger.Default, PlatformWallet.Default],
  scoped: Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const ledger = yield* BudgetLedger
    const admissionCache = yield* AdmissionCache
    const wallet = yield* PlatformWallet
    const config = yield* Config.all({
      timing: capabilityTiming,
      catalogPath: catalogPathConfig,
      allowPrivate: allowPrivateUrls,
      demo: demoEnabled
    }).pipe(Effect.orDie)

    const providerColumns = providerColumnsOf(sql)
    const { upsertCatalog, seed, demoProviders, credentialFor } = makeCatalog(sql, providerColumns, config)

    // --- policy and browsing ------------------------------------------------------------------

    const loadPolicy = (platformId: string) =>
      sql<{ caps: unknown }>`SELECT settings->'capabilities' AS caps FROM platforms WHERE id = ${platformId}`.pipe(
        Effect.map((rows) => policyOf(rows[0]?.caps)),
        Effect.orDie
      )

    /** Browsing: platform and end-user keys; the operator key has no platform policy. */
    const browser = (principal: Principal) =>
      principal._tag === "Admin"
        ? Effect.fail(new Forbidden({ code: "forbidden", message: "Use a platform or end-user key" }))
        : Effect.succeed(principal)

    /** Search and run: an end-user key with the inference scope, on a platform that enabled the feature. */
    const runner = (principal: Principal) =>
      Effect.gen(function*() {
        if (principal._tag !== "EndUserKey") {
          return yield* new Forbidden({ code: "forbidden", message: "Capabilities search and run need an end-user (sk-eu_) key" })
        }
        if (!principal.scopes.includes("inference")) {
          return yield* new Forbidden({ code: "insufficient_scope", message: "This key lacks the inference scope" })
        }
        const policy = yield* loadPolicy(principal.platformId)
        if (!policy.enabled) {
          return yield* new Forbidden({ code: "capabilities_disabled", message: "Capabilities are not enabled for this platform" })
        }
        return { caller: principal satisfies EndUserPrincipal, policy }
      })

    const activeCatalog = Effect.all([
      sql<CapabilityRow>`SELECT id, slug, name, description, domains, minted_by, is_active FROM capabilities
        WHERE is_active ORDER BY slug`,
      sql<ProviderRow>`SELECT ${providerColumns} FROM capability_providers p
        JOIN capabilities c ON c.id = p.capability_id WHERE p.is_active AND c.is_active`
    ]).pipe(Effect.orDie)

    /** GET /v1/capabilities. */
    const listCapabilities = (principal: Principal): Effect.Effect<CapabilityList, Forbidden> =>
      Effect.gen(function*() {
        const caller = yield* browser(principal)
        const policy = yield* loadPolicy(caller.platformId)
        const [caps, providers] = yield* activeCatalog
        const capabilities = caps.map((c): CapabilityShelf => {
          const own = providers.filter((p) => p.capability_id === c.id)
          const mins = own.map((p) => price(p.min_price_usd) ?? quotedPrice(p)).filter((v) => v !== null)
          return {
            slug: c.slug,
            name: c.name,
            description: c.description,
            provider_count: own.length,
            in_policy_count: own.filter((p) => policyStateOf(policy, c.slug, p) === "in_policy").length,
            min_price_usd: mins.length === 0 ? null : mins.reduce(BigDecimal.min),
            minted_by: c.minted_by,
            domains: c.domains
          }
        })
        return { enabled: policy.enabled, capabilities }
      }).pipe(Effect.withSpan("Capabilities.listCapabilities"))

    /** GET /v1/capabilities/{slug}: every provider with its policy state, filtered and sorted. */
    const listProviders = (principal: Principal, slug: string, query: ProviderFilter): Effect.Effect<CapabilityDetail, Forbidden | NotFound> =>
      Effect.gen(function*() {
        const caller = yield* browser(principal)
        const policy = yield* loadPolicy(caller.platformId)
        const [cap] = yield* sql<CapabilityRow>`SELECT id, slug, name, description, domains, minted_by, is_active
          FROM capabilities WHERE slug = ${slug} AND is_active`.pipe(Effect.orDie)
        if (cap === undefined) return yield* notFound
        const rows = yield* sql<ProviderRow>`SELECT ${providerColumns} FROM capability_providers p
          WHERE p.capability_id = ${cap.id} AND p.is_active`.pipe(Effect.orDie)
        const maxCost = query.max_cost === undefined ? null : dec(query.max_cost)
        const kept = rows
          .filter((p) => {
            if (maxCost !== null) {
              const quoted = quotedPrice(p)
              if (quoted === null || BigDecimal.greaterThan(quoted, maxCost)) return false
            }
            if (query.min_rating !== undefined && (rating(p) === null || rating(p)! < query.min_rating)) return false
            if (query.verified_only === true && p.availability !== "healthy") return false
            return true
          })
          .sort(query.sort === "rating" ? byRating : byCost)
          .slice(0, Math.min(query.limit ?? PROVIDER_LIST_CAP, PROVIDER_LIST_CAP))
        return {
          slug: cap.slug,
          name: cap.name,
          description: cap.description,
          enabled: policy.enabled,
          providers: kept.map((p) => toProvider(policy, cap.slug, p))
        }
      }).pipe(Effect.withSpan("Capabilities.listProviders", { attributes: { "capability.slug": slug } }))

    /**
     * POST /v1/capabilities/search: Postgres full-text search over capability and provider text.
     * Any query term may match (OR); matching all terms (websearch AND) ranks first.
     */
    const search = (principal: Principal, query: string, limit: number): Effect.Effect<SearchResponse, Forbidden> =>
      Effect.gen(function*() {
        const { policy } = yield* runner(principal)
        const rows = yield* sql<JoinedRow & { readonly score: number }>`
          WITH q AS (SELECT websearch_to_tsquery('english', ${query}) AS allq),
          q2 AS (SELECT allq, replace(allq::text, ' & ', ' | ')::tsquery AS anyq FROM q)
          SELECT ${providerColumns}, c.slug AS capability_slug,
            (ts_rank(c.search || p.search, q2.anyq) + CASE WHEN (c.search || p.search) @@ q2.allq THEN 1 ELSE 0 END)::float8 AS score
          FROM capability_providers p JOIN capabilities c ON c.id = p.capability_id CROSS JOIN q2
          WHERE p.is_active AND c.is_active AND p.availability <> 'down' AND (c.search || p.search) @@ q2.anyq
          ORDER BY score DESC, p.rating DESC NULLS LAST,
            coalesce(p.median_price_usd, p.min_price_usd, p.max_price_usd) ASC NULLS LAST, p.slug, p.id
          LIMIT 500`.pipe(Effect.orDie)
        const candidates = rows
          .filter((p) => policyStateOf(policy, p.capability_slug, p) === "in_policy")
          .slice(0, limit)
          .map((p) => ({
            uid: uidOf(p.id),
            slug: p.slug,
            name: p.name,
            description: p.description,
            url: p.url,
            cost_usd: reservePrice(p) ?? ZERO,
            protocol: p.protocol,
            rating: rating(p)
          }))
        return { candidates }
      }).pipe(Effect.withSpan("Capabilities.search"))

    // --- runs ---------------------------------------------------------------------------------

    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    interface Reserved {
      readonly runId: string
      readonly budgetId: string
    }

    /**
     * The hold, in its own committed transaction: lock the budget, re-check it with the open holds
     * subtracted, lock the wallet and re-check it likewise, insert the open run. Concurrent runs
     * serialise on the budget row (one user) and the wallet row (one platform), so the holds
     * together never exceed what remains of either.
     */
    const reserve = (caller: EndUserPrincipal, provider: JoinedRow, hold: BigDecimal.BigDecimal) =>
      Effect.gen(function*() {
        const at = yield* now
        const budget: BudgetRow = yield* ledger.lockCurrent(caller.platformId, caller.endUserId, at).pipe(
          Effect.catchTag("NotFound", () =>
            Effect.fail(new PaymentRequired({ code: "no_budget", param: "budget", message: "Capability runs need a budget; this end user has none" })))
        )
        if (!budget.is_active) {
          return yield* new PaymentRequired({ code: "no_budget", param: "budget", message: "The end user's budget is not active" })
        }
        if (budget.is_suspended) {
          return yield* new PaymentRequired({ code: "budget_suspended", param: "budget", message: "The budget is suspended" })
        }
        const [held] = yield* sql<{ held: string }>`SELECT ${heldOnBudgetSql(sql, budget.id)}::text AS held`
        const available = BigDecimal.subtract(BigDecimal.subtract(dec(budget.max_usd), dec(budget.used_usd)), dec(held!.held))
        if (BigDecimal.lessThanOrEqualTo(available, ZERO) || BigDecimal.lessThan(available, hold)) {
          return yield* new PaymentRequired({
            code: "budget_exhausted",
            param: "usd_ledger",
            message: `The budget cannot hold ${BigDecimal.format(hold)} USD (available after open holds: ${BigDecimal.format(available)} USD)`
          })
        }
        // Locked after the budget (settlement's order), then summed: runs of the platform's other
        // end users serialise here, so their holds together never exceed the wallet either.
        const [walletRow] = yield* sql<{ readonly balance: string }>`SELECT balance_usd::text AS balance
          FROM platform_wallets WHERE platform_id = ${caller.platformId} FOR UPDATE`
        const balance = walletRow === undefined ? ZERO : dec(walletRow.balance)
        const walletHeld = yield* platformOpenHoldsUsd(caller.platformId).pipe(Effect.provideService(PgClient.PgClient, sql))
        if (BigDecimal.lessThan(BigDecimal.subtract(balance, walletHeld), hold)) {
          return yield* new PaymentRequired({
            code: "wallet_insufficient",
            param: "platform_wallet",
            message: `The platform wallet cannot cover the hold of ${BigDecimal.format(hold)} USD`
          })
        }
        const expiresMs = config.timing.timeoutMs + config.timing.graceMs
        const [run] = yield* sql<{ id: string }>`INSERT INTO capability_runs
            (platform_id, end_user_id, budget_id, api_key_id, capability_id, provider_id, hold_usd, state, created_at, expires_at)
          VALUES (${caller.platformId}, ${caller.endUserId}, ${budget.id}, ${caller.keyId}, ${provider.capability_id},
            ${provider.id}, ${sqlDec(hold)}, 'open', ${at}, now() + ${expiresMs}::double precision * interval '1 millisecond')
          RETURNING id`
        const reserved: Reserved = { runId: run!.id, budgetId: budget.id }
        return reserved
      }).pipe(
        sql.withTransaction,
        // Admission counts open holds: its cached state of the platform must see this one.
        Effect.tap(() => admissionCache.invalidate(caller.platformId)),
        Effect.catchTag("SqlError", Effect.die),
        Effect.withSpan("Capabilities.reserve")
      )

    /**
     * One transaction: close the run (only if still open), then the budget debit row, the platform
     * wallet debit and the `capability` log row. A run that recovery already released is not charged.
     */
    const settle = (
      caller: EndUserPrincipal,
      provider: JoinedRow,
      reserved: Reserved,
      s: Settlement,
      latencyMs: number
    ) =>
      Effect.gen(function*() {
        const at = yield* now
        const charge = s.charge && BigDecimal.greaterThan(s.cost, ZERO)
        const budget = yield* ledger.lockActive(caller.platformId, caller.endUserId, at)
        const closed = yield* sql`UPDATE capability_runs SET state = ${s.state}, cost_usd = ${sqlDec(charge ? s.cost : ZERO)},
            status = ${s.status}, ok = ${s.ok}, error_message = ${s.error}, settled_at = ${at}
          WHERE id = ${reserved.runId} AND platform_id = ${caller.platformId} AND state = 'open' RETURNING id`
        if (closed.length === 0) return { state: "released" as const, charged: false, cost: ZERO }
        const metadata = { run_id: reserved.runId, capability: provider.capability_slug, provider: uidOf(provider.id), provider_slug: provider.slug }
        let chargedEndUser = false
        if (charge) {
          // The hold's budget, unless it was deleted (or replaced) while the call ran.
          if (Option.isSome(budget) && budget.value.id === reserved.budgetId) {
            yield* ledger.debitLocked(budget.value, { amount: s.cost, reason: "capability_run", metadata }, actorOf(caller), at)
            chargedEndUser = true
          }
          yield* wallet.debit(caller.platformId, s.cost, { ...metadata, request_type: "capability" })
        }
        yield* insertLogRow(sql, {
          platform_id: caller.platformId, end_user_id: caller.endUserId, request_type: "capability",
          ...NOT_A_MODEL_CALL,
          latency_ms: Math.max(0, latencyMs),
          estimated_cost_usd: sqlDec(charge ? s.cost : ZERO),
          status: s.state === "billed" && s.ok ? "success" : "error", error_message: s.error,
          billing_status: charge ? "billed" : "not_billed",
          metadata: { ...metadata, final_state: s.state, http_status: s.status },
          created_at: at
        })
        return { state: s.state, charged: chargedEndUser, cost: charge ? s.cost : ZERO }
      }).pipe(
        sql.withTransaction,
        Effect.retry({ while: isQueryCanceled, times: 3 }),
        Effect.orDie,
        Effect.withSpan("Capabilities.settle")
      )

    /** POST /v1/capabilities/run. */
    const run = (principal: Principal, body: RunRequest): Effect.Effect<RunResponse, Forbidden | NotFound | PaymentRequired> =>
      Effect.gen(function*() {
        const { caller, policy } = yield* runner(principal)
        const id = body.capability.startsWith("cap_") ? body.capability.slice(4) : ""
        if (!isUuid(id)) return yield* noProvider
        const [provider] = yield* sql<JoinedRow>`SELECT ${providerColumns}, c.slug AS capability_slug
          FROM capability_providers p JOIN capabilities c ON c.id = p.capability_id
          WHERE p.id = ${id} AND p.is_active AND c.is_active`.pipe(Effect.orDie)
        if (provider === undefined || provider.url === null) return yield* noProvider
        const state = policyStateOf(policy, provider.capability_slug, provider)
        if (state === "denylisted") {
          return yield* new PaymentRequired({ code: "capability_denylisted", param: "capability", message: "The platform denylists this provider" })
        }
        if (state === "not_allowlisted") {
          return yield* new PaymentRequired({ code: "capability_not_allowlisted", param: "capability", message: "This provider is not on the platform's allowlist" })
        }
        if (state === "above_ceiling") {
          return yield* new PaymentRequired({ code: "capability_above_ceiling", param: "capability", message: "The provider's price is above the platform's ceiling" })
        }
        const reserveAt = reservePrice(provider)!
        const quoted = quotedPrice(provider)!
        if (body.max_pay !== undefined && BigDecimal.greaterThan(quoted, body.max_pay)) {
          return yield* new PaymentRequired({
            code: "capability_above_ceiling",
            param: "max_pay",
            message: `The provider's price (${BigDecimal.format(quoted)} USD) is above max_pay`
          })
        }
        const hold = body.max_pay === undefined ? reserveAt : BigDecimal.min(reserveAt, body.max_pay)
        const reserved = yield* reserve(caller, provider, hold)
        // From here the hold exists: the call and its settlement run to the end even if the client
        // goes away (the call has its own timeout), so a hold is never left open by a disconnect.
        const result = yield* Effect.gen(function*() {
          const credential = yield* credentialFor(provider)
          if (credential._tag === "Missing") {
            yield* Effect.logWarning(`capability provider ${provider.capability_slug}/${provider.slug} not called: ${credential.why}`)
          }
          const [outcome, latencyMs] = credential._tag === "Missing"
            ? [{ _tag: "NoAnswer", kind: "credential_missing", message: CREDENTIAL_MISSING } as const, 0] as const
            : yield* callProvider({
              url: provider.url!,
              method: provider.call_method,
              input: body.input ?? null,
              runId: reserved.runId,
              timeoutMs: config.timing.timeoutMs,
              allowPrivate: config.allowPrivate,
              demo: config.demo,
              credential: credential._tag === "Header" ? credential.credential : undefined
            })
          const s = settlementOf(outcome, provider, hold, policy)
          const settled = yield* settle(caller, provider, reserved, s, latencyMs)
          const response: RunResponse = {
            capability: provider.capability_slug,
            ok: s.ok,
            final_state: settled.state,
            status: s.status,
            cost_usd: settled.cost,
            charged_end_user: settled.charged,
            run_id: reserved.runId,
            result: outcome._tag === "Answered" ? outcome.body : { error: { type: outcome.kind, message: outcome.message } }
          }
          return response
        }).pipe(Effect.uninterruptible)
        return result
      }).pipe(Effect.withSpan("Capabilities.run", { attributes: { "capability.uid": body.capability } }))

    // --- recovery -----------------------------------------------------------------------------

    /** Releases open runs whose hold expired (a crash between hold and settlement). */
    const releaseExpired = sql<{ id: string }>`UPDATE capability_runs
        SET state = 'released', cost_usd = 0, settled_at = now(), error_message = 'hold expired without settlement; released by recovery'
      WHERE state = 'open' AND expires_at <= now() RETURNING id`.pipe(
      Effect.map((rows) => rows.length),
      Effect.tap((n) => (n > 0 ? Effect.logWarning(`released ${n} expired capability hold(s)`) : Effect.void)),
      Effect.orDie,
      Effect.withSpan("Capabilities.releaseExpired")
    )

    yield* seed
    yield* demoProviders
    yield* releaseExpired
    yield* releaseExpired.pipe(
      Effect.catchAllCause((cause) => Effect.logError("capability hold recovery failed", cause)),
      Effect.repeat(Schedule.spaced(Duration.millis(config.timing.sweepMs))),
      Effect.delay(Duration.millis(config.timing.sweepMs)),
      Effect.forkScoped
    )

    return { listCapabilities, listProviders, search, run, upsertCatalog, releaseExpired, seed } as const
  })
}) {}
