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
