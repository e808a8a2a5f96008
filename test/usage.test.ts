// Usage reports over real calls (two end users, two models on two mock providers, chat,
// responses and embeddings): the totals equal the inference log's charged costs, the budget
// debits and the platform wallet debits of the same range; every grouping partitions the totals
// exactly; filters, tenant isolation, the operator's view and the refusals of bad queries.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { sumUsd } from "../layers/ledger/Usage.js"
import { until } from "./support/Polling.js"
import { catalogMockEcho, createEndUser, createPlatform, type Gateway, ok, startGateway } from "./support/Gateway.js"

const HOUR = 3_600_000
const DAY = 24 * HOUR

let gw: Gateway
let started: number
const a = { platformId: "", platformKey: "", alice: { id: "", key: "" }, bob: { id: "", key: "" } }
const b = { platformId: "", platformKey: "", user: { id: "", key: "" } }

const usage = (query: string, key = a.platformKey, platformId = a.platformId) =>
  gw.call("GET", `/v1/platforms/${platformId}/usage?${query}`, { key })

const chat = async (key: string, model: string, content: string) =>
  ok(await gw.call("POST", "/v1/chat/completions", { key, body: { model, messages: [{ role: "user", content }] } }))

/** A platform with both providers' keys, a wallet, and end users with budgets. */
const tenant = async (name: string, users: ReadonlyArray<string>) => {
  const { platformId, platformKey } = await createPlatform(gw, { name })
  for (const provider of ["mock", "mock2"]) {
    ok(await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/${provider}`, { key: platformKey, body: { api_key: "mock-key" } }))
  }
  ok(await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } }))
  const made = []
  for (const externalId of users) {
    const eu = await createEndUser(gw, platformId, platformKey, externalId)
    ok(await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: 5 } }), 201)
    made.push({ id: eu.endUserId, key: eu.endUserKey })
  }
  return { platformId, platformKey, users: made }
}

/** The ledgers' view of platform A over [from, to): charged log costs, budget debits, wallet debits, calls. */
const ledgers = async (from: Date, to: Date, endUserId?: string) => {
  const user = endUserId === undefined ? "" : " AND end_user_id = $4"
  const args = endUserId === undefined ? [a.platformId, from, to] : [a.platformId, from, to, endUserId]
  const logs = await gw.db.pool.query(
    `SELECT estimated_cost_usd::text AS cost, billing_status, status, prompt_tokens, completion_tokens FROM inference_logs
      WHERE platform_id = $1 AND created_at >= $2 AND created_at < $3${user}`,
    args
  )
  const budgetUser = endUserId === undefined ? "" : " AND b.end_user_id = $4"
  const debits = await gw.db.pool.query(
    `SELECT t.amount_usd::text AS amount FROM budget_transactions t JOIN budgets b ON b.id = t.budget_id
      WHERE t.platform_id = $1 AND t.type = 'debit' AND t.created_at >= $2 AND t.created_at < $3${budgetUser}`,
    args
  )
  const wallet = await gw.db.pool.query(
    `SELECT amount_usd::text AS amount FROM platform_wallet_transactions
      WHERE platform_id = $1 AND type = 'debit' AND created_at >= $2 AND created_at < $3`,
    [a.platformId, from, to]
  )
  const charged = logs.rows.filter((r) => r.billing_status === "billed" || r.billing_status === "estimated")
  return {
    calls: logs.rows.length,
    errors: logs.rows.filter((r) => r.status !== "success" || r.billing_status === "failed").length,
    input_tokens: logs.rows.reduce((n, r) => n + r.prompt_tokens, 0),
    output_tokens: logs.rows.reduce((n, r) => n + r.completion_tokens, 0),
    logCost: sumUsd(charged.map((r) => r.cost)),
    budgetDebits: sumUsd(debits.rows.map((r) => r.amount)),
    walletDebits: sumUsd(wallet.rows.map((r) => r.amount))
  }
}

interface Counts {
  readonly calls: number
  readonly errors: number
  readonly input_tokens: number
  readonly output_tokens: number
  readonly cost_usd: string
}

/** The buckets' sums, to compare with the totals. */
const summed = (data: ReadonlyArray<Counts>): Counts => ({
  calls: data.reduce((n, d) => n + d.calls, 0),
  errors: data.reduce((n, d) => n + d.errors, 0),
  input_tokens: data.reduce((n, d) => n + d.input_tokens, 0),
  output_tokens: data.reduce((n, d) => n + d.output_tokens, 0),
  cost_usd: sumUsd(data.map((d) => d.cost_usd))
})

beforeAll(async () => {
  gw = await startGateway()
  started = Date.now()
  await catalogMockEcho(gw)
  ok(await gw.call("POST", "/v1/admin/providers", { key: gw.adminKey, body: { slug: "mock2", kind: "mock", base_url: "http://mock2.invalid" } }))
  ok(await gw.call("POST", "/v1/admin/models", {
    key: gw.adminKey,
    body: { slug: "mock-two", serves: ["chat", "embeddings"], providers: [{ provider: "mock2", provider_model_id: "two-1", input_usd_per_mtok: 3, output_usd_per_mtok: 7 }] }
  }))
  const first = await tenant("Usage A", ["alice", "bob"])
  Object.assign(a, { platformId: first.platformId, platformKey: first.platformKey, alice: first.users[0], bob: first.users[1] })
  const second = await tenant("Usage B", ["other"])
  Object.assign(b, { platformId: second.platformId, platformKey: second.platformKey, user: second.users[0] })

  await chat(a.alice.key, "mock-echo", "hello from alice")
  await chat(a.alice.key, "mock-echo", "a second question from alice, somewhat longer")
  await chat(a.alice.key, "mock-two", "alice tries the other model")
  await chat(a.bob.key, "mock-echo", "bob says hi")
  await chat(a.bob.key, "mock-two", "bob on model two")
  ok(await gw.call("POST", "/v1/responses", { key: a.bob.key, body: { model: "mock-two", input: "bob asks through the responses API" } }))
  ok(await gw.call("POST", "/v1/embeddings", { key: a.bob.key, body: { model: "mock-two", input: ["embed this", "and this"] } }))
  await chat(b.user.key, "mock-echo", "platform B's call")

  // A call whose settlement the database refuses: logged as failed, nothing debited.
  await gw.db.pool.query(`CREATE FUNCTION refuse_bob() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.type = 'debit' AND NEW.budget_id IN (SELECT id FROM budgets WHERE end_user_id = '${a.bob.id}') THEN
        RAISE EXCEPTION 'refused by test';
      END IF;
      RETURN NEW;
    END $$`)
  await gw.db.pool.query("CREATE TRIGGER refuse_bob BEFORE INSERT ON budget_transactions FOR EACH ROW EXECUTE FUNCTION refuse_bob()")
  try {
    await chat(a.bob.key, "mock-echo", "bob's call that cannot be billed")
    const failed = await until(
      () => gw.call("GET", `/v1/platforms/${a.platformId}/logs?billing_status=failed`, { key: a.platformKey }),
      (res) => res.body.data?.length === 1,
      30_000
    )
    expect(failed.body.data).toHaveLength(1)
  } finally {
    await gw.db.pool.query("DROP TRIGGER refuse_bob ON budget_transactions")
    await gw.db.pool.query("DROP FUNCTION refuse_bob()")
  }
}, 120_000)
afterAll(async () => {
  await gw?.close()
})

/**
 * Ranges around the calls: 0 is cut at arbitrary instants (read from the log at its edges), 1 is
 * whole hours (the hourly rollup), 2 whole days (the daily rollup by end user too).
 */
const ranges = () => {
  const now = Date.now()
  return [
    { from: new Date(started - 61_000), to: new Date(now + 59_000) },
    { from: new Date(Math.floor(started / HOUR) * HOUR - HOUR), to: new Date(Math.ceil(now / HOUR) * HOUR + HOUR) },
    { from: new Date(Math.floor(started / DAY) * DAY - DAY), to: new Date(Math.ceil(now / DAY) * DAY + DAY) }
  ]
}
const rangeQuery = (from: Date, to: Date) => `from=${from.toISOString()}&to=${to.toISOString()}`

describe("totals", () => {
  it.each([0, 1, 2])("equal the log's charged costs, the budget debits and the wallet debits (range %i)", async (index) => {
    const { from, to } = ranges()[index]!
    const report = ok(await usage(rangeQuery(from, to))).body
    const expected = await ledgers(from, to)
    expect(expected.calls).toBe(8)
    expect(report).toMatchObject({ object: "usage", from: from.toISOString(), to: to.toISOString(), group_by: "day" })
    expect(report.totals).toEqual({
      calls: expected.calls,
      errors: expected.errors,
      input_tokens: expected.input_tokens,
      output_tokens: expected.output_tokens,
      cost_usd: expected.logCost
    })
    expect(report.totals.cost_usd).toBe(expected.budgetDebits)
    expect(report.totals.cost_usd).toBe(expected.walletDebits)
    expect(Number(report.totals.cost_usd)).toBeGreaterThan(0)
  })

  it("count a call whose settlement failed as an error, not in the cost", async () => {
    for (const { from, to } of ranges()) {
      const bob = ok(await usage(`${rangeQuery(from, to)}&end_user_id=${a.bob.id}`)).body
      const failed = await gw.db.pool.query(
        "SELECT estimated_cost_usd::text AS cost FROM inference_logs WHERE end_user_id = $1 AND billing_status = 'failed'",
        [a.bob.id]
      )
      expect(Number(failed.rows[0].cost)).toBeGreaterThan(0)
      const expected = await ledgers(from, to, a.bob.id)
      expect(bob.totals.calls).toBe(5)
      expect(bob.totals.errors).toBe(1)
      expect(bob.totals.cost_usd).toBe(expected.budgetDebits)
      expect(bob.totals.cost_usd).toBe(expected.logCost)
    }
  })

  it("default to the 30 days up to now", async () => {
    const report = ok(await usage("")).body
    const from = new Date(report.from).getTime()
    const to = new Date(report.to).getTime()
    expect(to - from).toBe(30 * DAY)
    expect(Math.abs(to - Date.now())).toBeLessThan(60_000)
    expect(report.totals.calls).toBe(8)
  })
})

describe("groupings", () => {
  it.each(["day", "hour", "model", "end_user", "provider"])("group_by=%s partitions the totals exactly", async (groupBy) => {
    for (const { from, to } of ranges()) {
      const report = ok(await usage(`${rangeQuery(from, to)}&group_by=${groupBy}`)).body
      expect(report.group_by).toBe(groupBy)
      expect(summed(report.data)).toEqual(report.totals)
      expect(report.has_more).toBe(false)
    }
  })

  it("time buckets start at UTC boundaries, in order, empty ones with zeros", async () => {
    const to = new Date(Math.ceil(Date.now() / DAY) * DAY)
    const from = new Date(to.getTime() - 3 * DAY)
    const days = ok(await usage(`${rangeQuery(from, to)}&group_by=day`)).body.data
    expect(days.map((d: { key: string }) => d.key)).toEqual([0, 1, 2].map((i) => new Date(from.getTime() + i * DAY).toISOString()))
    expect(days.slice(0, 2).every((d: Counts) => d.calls === 0 && d.cost_usd === "0")).toBe(true)
    expect(days[2].calls).toBe(8)

    const hours = ok(await usage(`${rangeQuery(new Date(to.getTime() - DAY), to)}&group_by=hour`)).body.data
    expect(hours).toHaveLength(24)
    const keys = hours.map((h: { key: string }) => new Date(h.key).getTime())
    expect(keys.every((k: number, i: number) => k % HOUR === 0 && (i === 0 || k - keys[i - 1] === HOUR))).toBe(true)
  })

  it("model, end user and provider buckets name their key, costliest first", async () => {
    const { from, to } = ranges()[0]!
    const byModel = ok(await usage(`${rangeQuery(from, to)}&group_by=model`)).body.data
    expect(byModel.map((d: { key: string }) => d.key).sort()).toEqual(["mock-echo", "mock-two"])
    const byUser = ok(await usage(`${rangeQuery(from, to)}&group_by=end_user`)).body.data
    expect(byUser.map((d: { key: string; external_id: string }) => [d.key, d.external_id]).sort()).toEqual(
      [[a.alice.id, "alice"], [a.bob.id, "bob"]].sort()
    )
    const byProvider = ok(await usage(`${rangeQuery(from, to)}&group_by=provider`)).body.data
    expect(byProvider.map((d: { key: string }) => d.key).sort()).toEqual(["mock", "mock2"])
    for (const data of [byModel, byUser, byProvider]) {
      const costs = data.map((d: Counts) => Number(d.cost_usd))
      expect(costs).toEqual([...costs].sort((x, y) => y - x))
    }
    const limited = ok(await usage(`${rangeQuery(from, to)}&group_by=model&limit=1`)).body
    expect(limited.data).toEqual([byModel[0]])
    expect(limited.has_more).toBe(true)
  })
})

describe("filters", () => {
  it.each([0, 1, 2])("end_user_id and model narrow every figure to their calls (range %i)", async (index) => {
    const { from, to } = ranges()[index]!
    const alice = ok(await usage(`${rangeQuery(from, to)}&end_user_id=${a.alice.id}`)).body
    const expected = await ledgers(from, to, a.alice.id)
    expect(alice.totals).toEqual({
      calls: 3, errors: 0, input_tokens: expected.input_tokens, output_tokens: expected.output_tokens, cost_usd: expected.logCost
    })
    expect(alice.totals.cost_usd).toBe(expected.budgetDebits)

    const byModel = ok(await usage(`${rangeQuery(from, to)}&group_by=model`)).body.data
    const two = ok(await usage(`${rangeQuery(from, to)}&model=mock-two&group_by=end_user`)).body
    expect(two.totals).toEqual(summed(byModel.filter((d: { key: string }) => d.key === "mock-two")))
    expect(two.totals.calls).toBe(4)
    const both = ok(await usage(`${rangeQuery(from, to)}&model=mock-two&end_user_id=${a.alice.id}`)).body
    expect(both.totals.calls).toBe(1)
    expect(ok(await usage(`${rangeQuery(from, to)}&end_user_id=not-an-id`)).body.totals.calls).toBe(0)
    // One end user's hours come from the log alone.
    const hours = ok(await usage(`${rangeQuery(from, new Date(Math.min(to.getTime(), from.getTime() + 31 * DAY)))}&group_by=hour&end_user_id=${a.alice.id}`)).body
    expect(hours.totals).toEqual(alice.totals)
    expect(summed(hours.data)).toEqual(hours.totals)
  })
})

describe("access", () => {
  it("another platform's key gets 404; end-user and operator keys get 403", async () => {
    const other = await usage("", b.platformKey, a.platformId)
    expect(other.status).toBe(404)
    expect(other.body.error.code).toBe("not_found")
    expect((await usage("", a.alice.key)).status).toBe(403)
    expect((await usage("", gw.adminKey)).status).toBe(403)
    expect((await gw.call("GET", "/v1/admin/usage", { key: a.platformKey })).status).toBe(403)
  })

  it("the operator sees every platform, by platform or one of them", async () => {
    const { from, to } = ranges()[0]!
    const all = ok(await gw.call("GET", `/v1/admin/usage?${rangeQuery(from, to)}&group_by=platform`, { key: gw.adminKey })).body
    expect(all.data.map((d: { key: string }) => d.key).sort()).toEqual([a.platformId, b.platformId].sort())
    expect(summed(all.data)).toEqual(all.totals)
    const own = ok(await usage(rangeQuery(from, to))).body
    expect(all.data.find((d: { key: string }) => d.key === a.platformId)).toEqual({ key: a.platformId, ...own.totals })
    const one = ok(await gw.call("GET", `/v1/admin/usage?${rangeQuery(from, to)}&platform_id=${a.platformId}&group_by=model`, { key: gw.adminKey })).body
    expect(one.totals).toEqual(own.totals)
    expect(one.data).toEqual(ok(await usage(`${rangeQuery(from, to)}&group_by=model`)).body.data)
  })
})

describe("refusals", () => {
  const now = Date.now()
  it.each([
    ["from after to", `from=${new Date(now).toISOString()}&to=${new Date(now - HOUR).toISOString()}`, "from"],
    ["an empty range", `from=${new Date(now).toISOString()}&to=${new Date(now).toISOString()}`, "from"],
    ["an unparseable date", "from=yesterday", "from"],
    ["a range past a year", `from=${new Date(now - 367 * DAY).toISOString()}&to=${new Date(now).toISOString()}`, "from"],
    ["hours past 31 days", `from=${new Date(now - 32 * DAY).toISOString()}&group_by=hour`, "from"],
    ["an unknown group_by", "group_by=week", "group_by"],
    ["group_by=platform for a platform", "group_by=platform", "group_by"],
    ["a limit past 1000", "group_by=model&limit=1001", "limit"]
  ])("%s: 422 validation_error", async (_name, query, param) => {
    const res = await usage(query)
    expect(res.status).toBe(422)
    expect(res.body.error).toMatchObject({ code: "validation_error", param })
  })
})

describe("the rollups", () => {
  /** Each rollup as the log says it should be, and as it is. */
  const compare = async () => {
    const rollups = [["usage_hourly", "hour", ""], ["usage_daily_users", "day", "end_user_id, "]] as const
    const results = []
    for (const [table, time, user] of rollups) {
      const columns = `platform_id, ${time}, ${user}model_slug, provider_id, request_type, calls::text, errors::text,
        input_tokens::text, output_tokens::text, trim_scale(cost_usd)::text AS cost_usd`
      const key = user === "" ? "1, 2, 3, 4, 5" : "1, 2, 3, 4, 5, 6"
      const expected = await gw.db.pool.query(`SELECT ${columns} FROM (
          SELECT platform_id, date_trunc('${time}', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS ${time}, ${user}model_slug,
            provider_id, request_type, count(*) AS calls,
            count(*) FILTER (WHERE status <> 'success' OR billing_status = 'failed') AS errors,
            sum(prompt_tokens) AS input_tokens, sum(completion_tokens) AS output_tokens,
            coalesce(sum(estimated_cost_usd) FILTER (WHERE billing_status IN ('billed', 'estimated')), 0) AS cost_usd
          FROM inference_logs GROUP BY ${key}) x ORDER BY ${key}`)
      const actual = await gw.db.pool.query(`SELECT ${columns} FROM ${table} WHERE calls <> 0 ORDER BY ${key}`)
      results.push({ table, expected: expected.rows, actual: actual.rows })
    }
    return results
  }
  const expectEqual = async () => {
    for (const { actual, expected } of await compare()) {
      expect(actual).toEqual(expected)
      expect(actual.length).toBeGreaterThan(0)
    }
  }

  it("equals the log through late rows, changed outcomes and deletions", async () => {
    await expectEqual()
    // A settlement replayed after a crash: written now, dated two days ago.
    const late = new Date(Date.now() - 2 * DAY)
    const [row] = (await gw.db.pool.query(`INSERT INTO inference_logs (platform_id, end_user_id, request_type, model_slug,
        prompt_tokens, completion_tokens, total_tokens, estimated_cost_usd, status, token_count_method, billing_status, created_at)
      VALUES ($1, $2, 'messages', 'mock-echo', 10, 20, 30, 0.00005, 'success', 'reported', 'billed', $3) RETURNING id`,
    [a.platformId, a.alice.id, late])).rows
    const day = new Date(Math.floor(late.getTime() / DAY) * DAY)
    const report = async () => {
      const range = rangeQuery(day, new Date(day.getTime() + DAY))
      const totals = ok(await usage(range)).body.totals
      expect(ok(await usage(`${range}&group_by=end_user`)).body.totals).toEqual(totals)
      return totals
    }
    expect(await report()).toEqual({ calls: 1, errors: 0, input_tokens: 10, output_tokens: 20, cost_usd: "0.00005" })
    // An outcome recorded afterwards (a paid tool call's error).
    await gw.db.pool.query("UPDATE inference_logs SET status = 'error' WHERE id = $1", [row.id])
    expect(await report()).toEqual({ calls: 1, errors: 1, input_tokens: 10, output_tokens: 20, cost_usd: "0.00005" })
    await expectEqual()
    await gw.db.pool.query("DELETE FROM inference_logs WHERE id = $1", [row.id])
    expect(await report()).toEqual({ calls: 0, errors: 0, input_tokens: 0, output_tokens: 0, cost_usd: "0" })
    await expectEqual()
  })
})
