// The OAuth authorization-code flow of the tool listener: the consent URL with a signed,
// single-use state, and the callback that exchanges the code and stores the sealed tokens.
import { PgClient } from "@effect/sql-pg"
import { Clock, Effect, Either, Option, Schema } from "effect"
import { randomUUID, timingSafeEqual } from "node:crypto"
import { BadRequest, ValidationError } from "../../schemas/Errors.js"
import { OAuthNonce } from "../../schemas/Tools.js"
import { Crypto } from "../platform/Crypto.js"
import type { EndUserPrincipal } from "../access/KeyAuth.js"
import type { Activations } from "./Activations.js"
import { appOf } from "./Catalog.js"
import { type AppUrls, authorizeLocation, newCodeVerifier, requestTokens, type TokenSet } from "./OAuth.js"
import { requireToolScope } from "./ToolScope.js"
import type { ToolApp } from "./apps/ToolApp.js"

/** OAuth state lifetime: the state is signed, single use, and valid 10 minutes. */
const STATE_TTL_MS = 10 * 60_000

interface StateRow {
  readonly id: string
  readonly platform_id: string
  readonly end_user_id: string
  readonly app_slug: string
  readonly code_verifier_encrypted: string | null
  readonly redirect_uri: string
  readonly expires_at: Date
  readonly used_at: Date | null
}

/** The query of GET {mcp_url}/oauth/callback as the browser brings it. */
export interface CallbackQuery {
  readonly code?: string | undefined
  readonly state?: string | undefined
  readonly error?: string | undefined
  readonly error_description?: string | undefined
}

const invalidState = new BadRequest({ code: "bad_request", message: "Invalid OAuth state: unknown or forged", param: "state" })

const checkNonce = (nonce: string | undefined) =>
  nonce === undefined || Schema.is(OAuthNonce)(nonce)
    ? Effect.succeed(nonce)
    : Effect.fail(
      new ValidationError({
        code: "validation_error",
        param: "nonce",
        message: "nonce: 1 to 128 characters of A-Z, a-z, 0-9, '-' and '_'"
      })
    )

const landing = (
  baseUrl: string,
  slug: string,
  nonce: string | undefined,
  outcome: { readonly error: string; readonly description: string } | null
) => {
  const url = new URL(`${baseUrl.replace(/\/+$/, "")}/mcp/oauth-callback`)
  url.searchParams.set("app", slug)
  url.searchParams.set("status", outcome === null ? "connected" : "error")
  // The landing route compares it with the nonce bound to the browser that started the flow.
  if (nonce !== undefined) url.searchParams.set("nonce", nonce)
  if (outcome !== null) {
    url.searchParams.set("error", outcome.error)
    url.searchParams.set("error_description", outcome.description)
  }
  return url.toString()
}

export const makeOAuthFlow = (activations: Activations, urlsOf: (app: ToolApp) => AppUrls) =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const crypto = yield* Crypto
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))
    const decrypt = (sealed: string) => Effect.try(() => crypto.decrypt(sealed)).pipe(Effect.orDie)

    // The state is `{row id}[.{platform nonce}].{HMAC of what precedes}`: the nonce travels signed
    // through the provider and back, so it needs no column; the row makes the state single use.
    const signState = (stateId: string, nonce: string | undefined) => {
      const payload = nonce === undefined ? stateId : `${stateId}.${nonce}`
      return `${payload}.${crypto.hmac("oauth-state", payload)}`
    }

    /** The row id and platform nonce of a state we signed, or undefined for anything forged or malformed. */
    const verifyState = (state: string | undefined): { readonly stateId: string; readonly nonce: string | undefined } | undefined => {
      if (state === undefined) return undefined
      const dot = state.lastIndexOf(".")
      if (dot <= 0) return undefined
      const payload = state.slice(0, dot)
      const given = Buffer.from(state.slice(dot + 1))
      const expected = Buffer.from(crypto.hmac("oauth-state", payload))
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined
      const [stateId = "", nonce, ...rest] = payload.split(".")
      if (rest.length > 0 || !/^[0-9a-f-]{36}$/.test(stateId)) return undefined
      if (nonce !== undefined && !Schema.is(OAuthNonce)(nonce)) return undefined
      return { stateId, nonce }
    }

    /**
     * GET {mcp_url}/oauth/authorize?app=[&nonce=]: the provider consent URL, with a fresh
     * single-use state that carries the platform's nonce back to its landing route.
     */
    const authorize = (principal: EndUserPrincipal, slug: string, mcpUrl: string, platformNonce?: string | undefined) =>
      Effect.gen(function*() {
        yield* requireToolScope(principal)
        const nonce = yield* checkNonce(platformNonce)
        const { app, activation: act } = yield* activations.activeApp(principal.platformId, slug)
        const stateId = randomUUID()
        const verifier = app.oauth.pkce ? newCodeVerifier() : null
        const redirectUri = `${mcpUrl}/oauth/callback`
        const at = yield* now
        yield* sql`INSERT INTO oauth_states (id, platform_id, end_user_id, app_slug, code_verifier_encrypted, redirect_uri, expires_at)
          VALUES (${stateId}, ${principal.platformId}, ${principal.endUserId}, ${app.slug},
            ${verifier === null ? null : crypto.encrypt(verifier)}, ${redirectUri}, ${new Date(at.getTime() + STATE_TTL_MS)})`.pipe(
          Effect.orDie
        )
        return authorizeLocation(app, urlsOf(app), {
          clientId: act.client_id,
          redirectUri,
          state: signState(stateId, nonce),
          codeVerifier: verifier
        })
      }).pipe(Effect.withSpan("ToolHost.authorize", { attributes: { "tool.app": slug } }))

    const storeTokens = (state: StateRow, tokens: TokenSet, at: Date) =>
      Effect.gen(function*() {
        // One active connection per (user, app): the new one replaces any earlier one.
        yield* sql`UPDATE tool_connections SET is_active = false, access_token_encrypted = NULL, refresh_token_encrypted = NULL,
            updated_at = now()
          WHERE end_user_id = ${state.end_user_id} AND app_slug = ${state.app_slug} AND is_active`
        yield* sql`INSERT INTO tool_connections (platform_id, end_user_id, app_slug, access_token_encrypted,
            refresh_token_encrypted, expires_at)
          VALUES (${state.platform_id}, ${state.end_user_id}, ${state.app_slug}, ${crypto.encrypt(tokens.accessToken)},
            ${tokens.refreshToken === null ? null : crypto.encrypt(tokens.refreshToken)},
            ${tokens.expiresIn === null ? null : new Date(at.getTime() + tokens.expiresIn * 1000)})`
      }).pipe(sql.withTransaction, Effect.orDie)

    /**
     * GET {mcp_url}/oauth/callback: claims the state (signature, unused, unexpired), exchanges the
     * code and answers the landing-page location. A forged state names no platform, so it fails
     * with BadRequest instead of a redirect.
     */
    const callback = (query: CallbackQuery) =>
      Effect.gen(function*() {
        const verified = verifyState(query.state)
        if (verified === undefined) return yield* invalidState
        const { stateId, nonce } = verified
        const at = yield* now
        const [claimed] = yield* sql<StateRow>`UPDATE oauth_states SET used_at = ${at}
          WHERE id = ${stateId} AND used_at IS NULL AND expires_at > ${at} RETURNING *`.pipe(Effect.orDie)
        const state = claimed ?? (yield* sql<StateRow>`SELECT * FROM oauth_states WHERE id = ${stateId}`.pipe(Effect.orDie))[0]
        if (state === undefined) return yield* invalidState
        const app = appOf(state.app_slug)
        const act = yield* activations.activation(state.platform_id, state.app_slug)
        if (app === undefined || Option.isNone(act)) return yield* invalidState
        const back = (outcome: { readonly error: string; readonly description: string } | null) =>
          landing(act.value.base_url, state.app_slug, nonce, outcome)
        if (claimed === undefined) {
          return back({ error: "invalid_state", description: "This authorization link was already used or has expired; start again" })
        }
        if (query.error !== undefined) {
          return back({ error: query.error, description: query.error_description ?? "The provider refused the authorization" })
        }
        if (query.code === undefined || query.code === "") {
          return back({ error: "invalid_request", description: "The provider sent no authorization code" })
        }
        const params: Record<string, string> = {
          grant_type: "authorization_code",
          code: query.code,
          redirect_uri: state.redirect_uri,
          client_id: act.value.client_id,
          client_secret: yield* decrypt(act.value.client_secret_encrypted)
        }
        if (state.code_verifier_encrypted !== null) params.code_verifier = yield* decrypt(state.code_verifier_encrypted)
        const tokens = yield* requestTokens(urlsOf(app).tokenUrl, params).pipe(Effect.either)
        if (Either.isLeft(tokens)) return back({ error: tokens.left.error, description: tokens.left.description })
        yield* storeTokens(state, tokens.right, at)
        return back(null)
      }).pipe(Effect.withSpan("ToolHost.callback"))

    return { authorize, callback } as const
  })
