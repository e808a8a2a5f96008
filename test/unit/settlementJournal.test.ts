// The settlement journal's files: what is appended, released, rotated and truncated, and what a
// later start reads back (a crashed instance's settlements, each once; torn lines skipped; other
// databases' and live instances' journals left alone). The crash itself: test/settlementJournal.test.ts.
import { BigDecimal, Option } from "effect"
import { randomUUID } from "node:crypto"
import { appendFileSync, copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { openJournal } from "../../layers/ledger/SettlementJournal.js"
import type { Settlement } from "../../layers/ledger/Settlement.js"

const dirs: Array<string> = []
const freshDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "journal-test-"))
  dirs.push(dir)
  return dir
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true })
})

const settlement = (cost: string, id = randomUUID()): Settlement => ({
  id,
  platformId: randomUUID(),
  endUserId: randomUUID(),
  costUsd: BigDecimal.unsafeFromString(cost),
  at: new Date("2026-11-23T06:00:00.123Z"),
  log: {
    request_type: "chat.completions",
    provider_id: randomUUID(),
    model_id: randomUUID(),
    model_slug: "m",
    provider_model_id: "p-1",
    prompt_tokens: 12,
    completion_tokens: 14,
    total_tokens: 26,
    latency_ms: 3,
    status: "success",
    error_message: null,
    token_count_method: "reported",
    metadata: { stream: false }
  },
  details: { model: "m" },
  actor: { type: "end_user_key", keyId: "k1" },
  displaySettings: null,
  parent: Option.none()
})

const files = (dir: string) => readdirSync(dir).filter((n) => n.endsWith(".jsonl"))

describe("settlement journal", () => {
  it("reads back what a crashed instance left: every field, exact amounts, each id once, torn lines skipped", () => {
    const dir = freshDir()
    const first = openJournal(dir, "db-1")
    const a = settlement("0.000038000000000001")
    const b = settlement("12.5")
    first.append(a)
    first.append(b)
    first.append(a) // queued again (an earlier replay): still one settlement
    // The crash: the file stays as it is, and the last write was cut short.
    const [file] = files(dir)
    const copy = join(dir, `999999999-crashed-0000-000000.jsonl`)
    copyFileSync(join(dir, file!), copy)
    appendFileSync(copy, "{\"id\":\"torn")
    first.close() // keeps its own file (settlements not released)

    const second = openJournal(dir, "db-1")
    // BigDecimal memoises its normalised form, so compare amounts by value.
    const plain = (s: Settlement) => ({ ...s, costUsd: BigDecimal.format(s.costUsd) })
    expect(second.leftovers.settlements.map(plain)).toEqual([a, b].map(plain))
    expect(BigDecimal.equals(second.leftovers.settlements[0]!.costUsd, BigDecimal.unsafeFromString("0.000038000000000001"))).toBe(true)
    expect(second.leftovers.files).toHaveLength(2)
    second.dropLeftovers()
    expect(files(dir)).toHaveLength(1) // only the new instance's own segment
    expect(statSync(join(dir, files(dir)[0]!)).mode & 0o777).toBe(0o600)
    second.close()
    expect(files(dir)).toHaveLength(0)
  })

  it("leaves alone the journals of another database and of instances still running", () => {
    const dir = freshDir()
    const other = openJournal(dir, "db-other")
    other.append(settlement("1"))
    other.close()
    const running = openJournal(dir, "db-1")
    running.append(settlement("2"))
    const parentPid = process.ppid // alive: the test runner's parent
    appendFileSync(join(dir, `${parentPid}-elsewhere-0000-000000.jsonl`), JSON.stringify({ journal: 1, database: "db-1" }) + "\n")

    const next = openJournal(dir, "db-1")
    expect(next.leftovers.settlements).toEqual([])
    expect(next.leftovers.foreign).toHaveLength(1)
    expect(next.leftovers.files).toEqual([])
    next.close()
    running.close()
    expect(files(dir)).toHaveLength(3) // db-other's, the running one's (unreleased) and the other process's
  })

  it("deletes a full segment once its settlements are written, and truncates the current one", () => {
    const dir = freshDir()
    const journal = openJournal(dir, "db-1", { segmentBytes: 2_000, truncateBytes: 1_000 })
    const segments = Array.from({ length: 6 }, () => journal.append(settlement("0.5")))
    const [full, current] = [...new Set(segments)]
    expect(current).toBeDefined() // rotated past 2,000 bytes
    expect(files(dir)).toHaveLength(2)
    for (const segment of segments.filter((s) => s === full)) journal.release(segment)
    expect(files(dir)).toHaveLength(1) // the first segment, all written, is gone
    for (const segment of segments.filter((s) => s === current)) journal.release(segment)
    const [left] = files(dir)
    expect(readFileSync(join(dir, left!), "utf8")).toBe(JSON.stringify({ journal: 1, database: "db-1" }) + "\n")
    journal.close()
    expect(files(dir)).toHaveLength(0)
  })
})
