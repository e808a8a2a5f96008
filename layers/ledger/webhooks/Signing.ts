// Endpoint secrets and the Standard Webhooks signature made with them.
import { createHmac, randomBytes } from "node:crypto"

/** Standard Webhooks: `v1,` + base64 HMAC-SHA256 of `id.timestamp.body`, keyed by the secret's base64 part. */
export const sign = (secret: string, webhookId: string, timestamp: number, body: string): string => {
  const key = Buffer.from(secret.slice(secret.indexOf("_") + 1), "base64")
  return `v1,${createHmac("sha256", key).update(`${webhookId}.${timestamp}.${body}`).digest("base64")}`
}

export const newSecret = (): string => `whsec_${randomBytes(24).toString("base64")}`
