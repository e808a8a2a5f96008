// Who is signed in: the key lives in sessionStorage (this tab only, gone when it closes) and in
// memory; signing out clears both. The key never goes into a URL or a log.
import { ApiError, request } from "./api"
import type { Platform } from "./types"

const STORAGE_KEY = "gateway-console-key"

export type Session =
  | { readonly kind: "platform"; readonly key: string; readonly platform: Platform }
  | { readonly kind: "operator"; readonly key: string }

export const storedKey = (): string | null => sessionStorage.getItem(STORAGE_KEY)

export const forgetKey = (): void => sessionStorage.removeItem(STORAGE_KEY)

/** Checks the key against the API and learns what it may see; stores it only when it works. */
export const signIn = async (rawKey: string): Promise<Session> => {
  const key = rawKey.trim()
  let session: Session
  if (key.startsWith("sk-admin_")) {
    await request(key, "GET", "/v1/admin/platforms", { query: { limit: 1 } })
    session = { kind: "operator", key }
  } else if (key.startsWith("sk-plat_")) {
    session = { kind: "platform", key, platform: await request<Platform>(key, "GET", "/v1/platform") }
  } else if (key.startsWith("sk-eu_")) {
    throw new ApiError(0, "end_user_key", "End-user keys cannot open the console. Sign in with a platform key (sk-plat_…) or the operator key (sk-admin_…).")
  } else {
    throw new ApiError(0, "not_a_gateway_key", "This is not a gateway key. Platform keys start with sk-plat_, the operator key with sk-admin_.")
  }
  sessionStorage.setItem(STORAGE_KEY, key)
  return session
}
