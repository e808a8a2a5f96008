// Ids: path ids are UUIDs (anything else can never name a row, so it is simply "not found"),
// and the OpenAI-style ids the gateway mints for what it answers.
import { randomUUID } from "node:crypto"

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

export const isUuid = (value: string): boolean => UUID.test(value)

/**
 * An OpenAI-style object id: `prefix` + 32 random hex chars (`chatcmpl-…`, `resp_…`, `msg_…`).
 * From randomUUID, which draws from a pooled buffer: randomBytes made a getrandom system call
 * per id, on every call (hot-path rule "linear per-event work", docs/performance.md).
 */
export const objectId = (prefix: string): string => `${prefix}${randomUUID().replaceAll("-", "")}`

/**
 * A time-ordered UUID (version 7, RFC 9562): 48 bits of Unix time in milliseconds, then 74
 * random bits (from randomUUID's pool; the variant bits stay). The ids of rows written on every
 * call (log rows, ledger rows, reservations): their primary key index grows at its right edge,
 * where random (version 4) keys land on a random leaf page each, which costs Postgres buffer
 * misses and full-page WAL images more and more as the table grows (docs/decisions.md).
 * Postgres's own defaults for those tables do the same (migration 0028).
 */
export const timeOrderedUuid = (): string => {
  const random = randomUUID() // xxxxxxxx-xxxx-4xxx-vxxx-xxxxxxxxxxxx
  const ms = Date.now().toString(16).padStart(12, "0")
  return `${ms.slice(0, 8)}-${ms.slice(8)}-7${random.slice(15)}`
}
