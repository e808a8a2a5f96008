// OAuth plumbing of the tool apps: PKCE (S256), the authorize URL, and the token endpoint calls
// (authorization-code exchange and refresh) with the providers' answer shapes normalised.
import { Data, Effect } from "effect"
import { createHash, randomBytes } from "node:crypto"
import type { ToolApp } from "./apps/ToolApp.js"

/** A token endpoint refusal or failure; `error` is the OAuth error code shown on the landing page. */
export class OAuthError extends Data.TaggedError("OAuthError")<{
  readonly error: string
  readonly description: string
  /** HTTP status of the token endpoint, null when it could not be reached. */
  readonly status: number | null
}> {}

export interface TokenSet {
  readonly accessToken: string
  readonly refreshToken: string | null
  /** Seconds until the access token expires, when the provider says. */
  readonly expiresIn: number | null
}

export interface AppUrls {
  readonly apiUrl: string
  readonly authorizeUrl: string
  readonly tokenUrl: string
}

export const newCodeVerifier = (): string => randomBytes(32).toString("base64url")

export const codeChallenge = (verifier: string): string => createHash("sha256").update(verifier).digest("base64url")

export const authorizeLocation = (
  app: ToolApp,
  urls: AppUrls,
  p: { readonly clientId: string; readonly redirectUri: string; readonly state: string; readonly codeVerifier: string | null }
): string => {
  const url = new URL(urls.authorizeUrl)
  url.searchParams.set("response_type", "code")
  url.searchParams.set("client_id", p.clientId)
  url.searchParams.set("redirect_uri", p.redirectUri)
  // Slack v2 takes user-token scopes as `user_scope` (`scope` would ask for a bot token).
  const scopeParam = app.slug === "slack" ? "user_scope" : "scope"
  if (app.oauth.scopes.length > 0) url.searchParams.set(scopeParam, app.oauth.scopes.join(app.oauth.scopeSeparator))
  url.searchParams.set("state", p.state)
  if (p.codeVerifier !== null) {
    url.searchParams.set("code_challenge", codeChallenge(p.codeVerifier))
    url.searchParams.set("code_challenge_method", "S256")
  }
  for (const [k, v] of Object.entries(app.oauth.extraAuthorizeParams)) url.searchParams.set(k, v)
  return url.toString()
}

const field = (body: unknown, ...path: ReadonlyArray<string>): unknown => {
  let cur: unknown = body
  for (const key of path) {
    if (typeof cur !== "object" || cur === null) return undefined
    cur = (cur as Record<string, unknown>)[key]
  }
  return cur
}

const str = (value: unknown): string | undefined => (typeof value === "string" && value !== "" ? value : undefined)

/** JSON (most providers) or form encoding (GitHub without Accept: application/json). */
const parseBody = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return Object.fromEntries(new URLSearchParams(text))
  }
}

/**
 * POSTs a token request (client credentials in the body, `client_secret_post`). Slack's
 * `oauth.v2.access` user tokens live under `authed_user`; `ok: false` is Slack's refusal.
 */
export const requestTokens = (tokenUrl: string, params: Readonly<Record<string, string>>): Effect.Effect<TokenSet, OAuthError> =>
  Effect.gen(function*() {
    const response = yield* Effect.tryPromise({
      try: (signal) =>
        fetch(tokenUrl, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded", accept: "application/json" },
          body: new URLSearchParams(params).toString(),
          signal: AbortSignal.any([signal, AbortSignal.timeout(15_000)])
        }),
      catch: () => new OAuthError({ error: "server_error", description: "The provider's token endpoint could not be reached", status: null })
    })
    const text = yield* Effect.tryPromise({
      try: () => response.text(),
      catch: () => new OAuthError({ error: "server_error", description: "The token response could not be read", status: response.status })
    })
    const body = parseBody(text)
    const error = str(field(body, "error"))
    if (!response.ok || error !== undefined || field(body, "ok") === false) {
      return yield* new OAuthError({
        error: error ?? (response.ok ? "token_exchange_failed" : `http_${response.status}`),
        description: str(field(body, "error_description")) ?? `The provider refused the token request (HTTP ${response.status})`,
        status: response.status
      })
    }
    const accessToken = str(field(body, "access_token")) ?? str(field(body, "authed_user", "access_token"))
    if (accessToken === undefined) {
      return yield* new OAuthError({ error: "token_exchange_failed", description: "The provider answered without an access token", status: response.status })
    }
    const refreshToken = str(field(body, "refresh_token")) ?? str(field(body, "authed_user", "refresh_token")) ?? null
    const rawExpiry = field(body, "expires_in") ?? field(body, "authed_user", "expires_in")
    const expiresIn = typeof rawExpiry === "number" ? rawExpiry : typeof rawExpiry === "string" && /^\d+$/.test(rawExpiry) ? Number(rawExpiry) : null
    return { accessToken, refreshToken, expiresIn }
  })
