// Crypto: AES-256-GCM for secrets at rest (webhook secrets, provider keys, OAuth tokens).
// The key is GATEWAY_ENCRYPTION_KEY (32 bytes, base64) or one generated into the data dir.
import { Config, Effect, Option, Redacted } from "effect"
import { createCipheriv, createDecipheriv, createHmac, randomBytes } from "node:crypto"
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { dataDir } from "./EmbeddedPostgres.js"

const loadKey = Effect.gen(function*() {
  const configured = yield* Config.option(Config.redacted("GATEWAY_ENCRYPTION_KEY"))
  let encoded: string
  if (Option.isSome(configured)) {
    encoded = Redacted.value(configured.value)
  } else {
    const dir = yield* dataDir
    const file = join(dir, "encryption-key")
    if (!existsSync(file)) {
      mkdirSync(dir, { recursive: true })
      writeFileSync(file, randomBytes(32).toString("base64") + "\n", { mode: 0o600 })
    }
    encoded = readFileSync(file, "utf8").trim()
  }
  const key = Buffer.from(encoded, "base64")
  if (key.length !== 32) return yield* Effect.dieMessage("GATEWAY_ENCRYPTION_KEY must be 32 bytes, base64-encoded")
  return key
})

export class Crypto extends Effect.Service<Crypto>()("gateway/Crypto", {
  effect: Effect.gen(function*() {
    const key = yield* loadKey.pipe(Effect.orDie)

    /** `v1.<iv>.<tag>.<ciphertext>`, all base64: self-describing so the format can evolve. */
    const encrypt = (plaintext: string): string => {
      const iv = randomBytes(12)
      const cipher = createCipheriv("aes-256-gcm", key, iv)
      const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()])
      return ["v1", iv.toString("base64"), cipher.getAuthTag().toString("base64"), body.toString("base64")].join(".")
    }

    const decrypt = (sealed: string): string => {
      const [version, iv, tag, body] = sealed.split(".")
      if (version !== "v1" || iv === undefined || tag === undefined || body === undefined) {
        throw new Error("unknown ciphertext format")
      }
      const decipher = createDecipheriv("aes-256-gcm", key, Buffer.from(iv, "base64"))
      decipher.setAuthTag(Buffer.from(tag, "base64"))
      return Buffer.concat([decipher.update(Buffer.from(body, "base64")), decipher.final()]).toString("utf8")
    }

    /**
     * HMAC-SHA256 (base64url) under a subkey per purpose (e.g. "oauth-state"), so a signature
     * made for one use can never be replayed as another and the AES key itself never signs.
     */
    const hmac = (purpose: string, data: string): string => {
      const subkey = createHmac("sha256", key).update(`gateway/${purpose}`).digest()
      return createHmac("sha256", subkey).update(data).digest("base64url")
    }

    return { encrypt, decrypt, hmac } as const
  })
}) {}
