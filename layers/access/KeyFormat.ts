// API key format: `sk-plat_` / `sk-eu_` / `sk-admin_` + 40 base62 chars from the CSPRNG.
// Only the SHA-256 and the first 12 characters (key_prefix) are ever stored.
import { hash, randomBytes } from "node:crypto"

export type KeyKind = "plat" | "eu" | "admin"
const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

/** 40 base62 characters from the CSPRNG (rejection sampling keeps them uniform). */
const randomBase62 = (length: number): string => {
  let out = ""
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte < 248 && out.length < length) out += BASE62[byte % 62]
    }
  }
  return out
}

/** One-shot SHA-256 (half the CPU of createHash/update/digest: it runs on every authenticated call). */
export const hashKey = (raw: string): Buffer => hash("sha256", raw, "buffer")

export interface MintedKey {
  readonly raw: string
  readonly hash: Buffer
  readonly prefix: string
}

/** A new secret `sk-<kind>_` + 40 base62 chars; only its hash and first 12 chars are stored. */
export const mintKey = (kind: KeyKind): MintedKey => {
  const raw = `sk-${kind}_${randomBase62(40)}`
  return { raw, hash: hashKey(raw), prefix: raw.slice(0, 12) }
}
