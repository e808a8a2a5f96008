// One end user: the budget (bar, topup, adjust, suspend and resume, each with its own
// Idempotency-Key kept until the action succeeds, so a retry after a lost answer replays instead
// of paying twice), its ledger rows, rate limits, keys (a new key is shown once; revoke), and
// the display wallet.
import { useState } from "preact/hooks"
import { ApiError, newIdempotencyKey, type Backfill, type Page } from "../api"
import { formatUnits, formatUsd } from "../money"
import type { ApiKey, ApiKeyCreated, Budget, BudgetTransaction, EndUser, RateLimits, WalletView } from "../types"
import { Badge, BudgetBar, field, Pager, SecretOnce, Show, Usd, useAction, useCall, useLoad, usePlatformId, When } from "../ui"

/** One Idempotency-Key per action, renewed once the action has succeeded. */
const useIdempotencyKey = (): [string, () => void] => {
  const [key, setKey] = useState(newIdempotencyKey)
  return [key, () => setKey(newIdempotencyKey())]
}

const orNull = <T,>(promise: Promise<T>): Promise<T | null> =>
  promise.catch((error: unknown) => {
    if (error instanceof ApiError && error.status === 404) return null
    throw error
  })

const withReason = (reason: string) => (reason === "" ? {} : { reason })

const BudgetCard = ({ base, onChange }: { base: string; onChange: () => void }) => {
  const call = useCall()
  const budget = useLoad(() => orNull(call<Budget>("GET", `${base}/budget`)), [base])
  const [createKey, renewCreate] = useIdempotencyKey()
  const [topupKey, renewTopup] = useIdempotencyKey()
  const [adjustKey, renewAdjust] = useIdempotencyKey()
  const [suspendKey, renewSuspend] = useIdempotencyKey()
  const action = useAction()

  const changed = () => {
    budget.reload()
    onChange()
  }

  const createBudget = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    void action.run(async () => {
      await call("POST", `${base}/budget`, {
        idempotencyKey: createKey,
        body: { max_usd: field(form, "max_usd"), period: field(form, "period") }
      })
      renewCreate()
      changed()
      return "Budget created."
    })
  }

  const topup = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const amount = field(form, "amount_usd")
    void action.run(async () => {
      await call("POST", `${base}/budget/topup`, {
        idempotencyKey: topupKey,
        body: { amount_usd: amount, ...withReason(field(form, "reason")) }
      })
      renewTopup()
      form.reset()
      changed()
      return `Topped up ${formatUsd(amount)}.`
    })
  }

  const adjust = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const maxUsd = field(form, "max_usd")
    const period = field(form, "period")
    void action.run(async () => {
      await call("PATCH", `${base}/budget`, {
        idempotencyKey: adjustKey,
        body: { max_usd: maxUsd, ...(period === "" ? {} : { period }), ...withReason(field(form, "reason")) }
      })
      renewAdjust()
      form.reset()
      changed()
      return `Budget set to ${formatUsd(maxUsd)}.`
    })
  }

  const setSuspended = (suspended: boolean) =>
    void action.run(async () => {
      await call("PATCH", `${base}/budget`, {
        idempotencyKey: suspendKey,
        body: { is_suspended: suspended, reason: suspended ? "suspended from the console" : "resumed from the console" }
      })
      renewSuspend()
      changed()
      return suspended ? "Budget suspended: the user's calls are refused (402 budget_suspended)." : "Budget resumed."
    })

  return (
    <section class="card">
      <h3>USD budget</h3>
      <Show loaded={budget} context="Budget unavailable">
        {(b) => b === null ? (
          <>
            <p class="muted">No live budget: this user spends against the platform wallet alone.</p>
            <form class="row" onSubmit={createBudget}>
              <input name="max_usd" inputMode="decimal" placeholder="max USD, e.g. 25" required aria-label="Budget max USD" />
              <select name="period" aria-label="Budget period">
                <option value="monthly">monthly</option>
                <option value="daily">daily</option>
                <option value="one_time">one time</option>
              </select>
              <button type="submit" disabled={action.busy}>Create budget</button>
            </form>
          </>
        ) : (
          <>
            <BudgetBar used={b.used_usd} max={b.max_usd} />
            <dl class="facts" data-testid="budget">
              <dt>Used</dt><dd><Usd value={b.used_usd} /></dd>
              <dt>Max</dt><dd data-testid="budget-max"><Usd value={b.max_usd} /></dd>
              <dt>Remaining</dt><dd><Usd value={b.remaining_usd} /></dd>
              {b.reserved_usd !== undefined && b.reserved_usd !== "0" ? <><dt>Held by calls in flight</dt><dd><Usd value={b.reserved_usd} /></dd></> : null}
              <dt>Period</dt><dd>{b.period.replace("_", " ")} since <When value={b.period_start} /></dd>
              <dt>State</dt><dd>{b.is_suspended ? <Badge tone="warn">suspended</Badge> : <Badge tone="good">active</Badge>}</dd>
            </dl>
            <form class="row" onSubmit={topup}>
              <input name="amount_usd" inputMode="decimal" placeholder="amount USD" required aria-label="Top-up amount USD" />
              <input name="reason" placeholder="reason (optional)" aria-label="Top-up reason" />
              <button type="submit" disabled={action.busy}>Top up</button>
            </form>
            <form class="row" onSubmit={adjust}>
              <input name="max_usd" inputMode="decimal" placeholder="new max USD" required aria-label="Adjusted max USD" />
              <select name="period" aria-label="Adjusted period">
                <option value="">keep the {b.period.replace("_", " ")} period</option>
                <option value="monthly">monthly</option>
                <option value="daily">daily</option>
                <option value="one_time">one time</option>
              </select>
              <input name="reason" placeholder="reason (optional)" aria-label="Adjustment reason" />
              <button type="submit" class="secondary" disabled={action.busy}>Adjust</button>
            </form>
            <div class="row">
              {b.is_suspended
                ? <button type="button" disabled={action.busy} onClick={() => setSuspended(false)}>Resume</button>
                : <button type="button" class="danger" disabled={action.busy} onClick={() => setSuspended(true)}>Suspend</button>}
            </div>
          </>
        )}
      </Show>
      {action.feedback}
    </section>
  )
}

/** A date input's day (UTC) as the listing's `since`. */
const sinceOf = (day: string) => (day === "" ? undefined : new Date(`${day}T00:00:00Z`).toISOString())

const daysAgo = (days: number) => new Date(Date.now() - days * 86_400_000).toISOString().slice(0, 10)

/**
 * The budget's ledger rows in the API's backfill order (oldest first) from a chosen day on;
 * "Load more" follows `next_cursor`, which never skips nor repeats a row.
 */
const Ledger = ({ base, round }: { base: string; round: number }) => {
  const call = useCall()
  const [since, setSince] = useState(() => daysAgo(30))
  const [rows, setRows] = useState<ReadonlyArray<BudgetTransaction>>([])
  const [cursor, setCursor] = useState<string | null>(null)
  const [loadingMore, setLoadingMore] = useState(false)
  const path = `${base}/budget/transactions`
  const first = useLoad(async () => {
    const page = await orNull(call<Backfill<BudgetTransaction>>("GET", path, { query: { since: sinceOf(since), limit: 100 } }))
    setRows(page?.data ?? [])
    setCursor(page === null || page.data.length < page.limit ? null : page.next_cursor)
    return page
  }, [path, round, since])
  const more = useAction()
  const loadMore = () =>
    void more.run(async () => {
      setLoadingMore(true)
      try {
        const page = await call<Backfill<BudgetTransaction>>("GET", path, { query: { after: cursor, limit: 100 } })
        setRows([...rows, ...page.data])
        setCursor(page.data.length < page.limit ? null : page.next_cursor)
      } finally {
        setLoadingMore(false)
      }
      return undefined
    })
  return (
    <section class="card">
      <div class="title-row">
        <h3>Budget history (ledger rows)</h3>
        <label class="inline">Since <input type="date" value={since} onChange={(e) => setSince((e.currentTarget as HTMLInputElement).value)} aria-label="Ledger rows since (UTC day)" /></label>
      </div>
      <Show loaded={first} context="Ledger unavailable">
        {(page) => page === null ? <p class="muted">No live budget.</p> : rows.length === 0 ? <p class="muted">No ledger rows since {since}.</p> : (
          <>
            <table data-testid="ledger">
              <thead><tr><th>When</th><th>Type</th><th class="num">Amount</th><th class="num">Used after</th><th class="num">Max after</th><th>Reason</th><th>By</th></tr></thead>
              <tbody>
                {rows.map((row) => (
                  <tr key={row.id}>
                    <td><When value={row.created_at} /></td>
                    <td>{row.type}</td>
                    <td class="num"><Usd value={row.amount_usd} /></td>
                    <td class="num"><Usd value={row.used_usd_after} /></td>
                    <td class="num"><Usd value={row.max_usd_after} /></td>
                    <td>{row.reason ?? ""}</td>
                    <td>{row.actor_type.replaceAll("_", " ")}</td>
                  </tr>
                ))}
              </tbody>
            </table>
            {cursor === null ? null : <button type="button" class="secondary" disabled={loadingMore} onClick={loadMore}>Load more</button>}
            {more.feedback}
          </>
        )}
      </Show>
    </section>
  )
}

const limitText = (value: number | null) => (value === null ? "unlimited" : String(value))

const RateLimitsCard = ({ base }: { base: string }) => {
  const call = useCall()
  const limits = useLoad(() => call<RateLimits>("GET", `${base}/rate-limits`), [base])
  const action = useAction()
  const number = (form: HTMLFormElement, name: string) => {
    const text = field(form, name)
    return text === "" ? null : Number(text)
  }
  const save = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    void action.run(async () => {
      await call("PUT", `${base}/rate-limits`, {
        body: { rpm_limit: number(form, "rpm_limit"), tpm_limit: number(form, "tpm_limit"), rpd_limit: number(form, "rpd_limit") }
      })
      form.reset()
      limits.reload()
      return "Rate limits saved."
    })
  }
  const reset = () =>
    void action.run(async () => {
      await call("DELETE", `${base}/rate-limits`)
      limits.reload()
      return "Back to the platform's default limits."
    })
  return (
    <section class="card">
      <h3>Rate limits</h3>
      <Show loaded={limits} context="Rate limits unavailable">
        {(l) => (
          <>
            <p>
              {limitText(l.rpm_limit)} requests/min · {limitText(l.tpm_limit)} tokens/min · {limitText(l.rpd_limit)} requests/day
              <span class="muted"> ({l.resolution === "explicit" ? "this user's own" : l.resolution === "default" ? "platform default" : "no limits set"})</span>
            </p>
            <form class="row" onSubmit={save}>
              <input name="rpm_limit" type="number" min="1" placeholder="rpm" aria-label="Requests per minute" />
              <input name="tpm_limit" type="number" min="1" placeholder="tpm" aria-label="Tokens per minute" />
              <input name="rpd_limit" type="number" min="1" placeholder="rpd" aria-label="Requests per day" />
              <button type="submit" disabled={action.busy}>Set</button>
              {l.resolution === "explicit" ? <button type="button" class="secondary" onClick={reset}>Use default</button> : null}
            </form>
            <p class="muted">Empty fields mean unlimited.</p>
          </>
        )}
      </Show>
      {action.feedback}
    </section>
  )
}

const KeysCard = ({ platformId, endUserId }: { platformId: string; endUserId: string }) => {
  const call = useCall()
  const keysPath = `/v1/platforms/${platformId}/api-keys`
  const [page, setPage] = useState(1)
  const keys = useLoad(
    () => call<Page<ApiKey>>("GET", keysPath, { query: { type: "end_user", end_user_id: endUserId, limit: 20, page } }),
    [endUserId, page]
  )
  const [created, setCreated] = useState<ApiKeyCreated | null>(null)
  const action = useAction()
  const create = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const name = field(form, "name")
    void action.run(async () => {
      setCreated(await call<ApiKeyCreated>("POST", keysPath, { body: { end_user_id: endUserId, ...(name === "" ? {} : { name }) } }))
      form.reset()
      keys.reload()
      return undefined
    })
  }
  const setActive = (key: ApiKey, active: boolean) =>
    void action.run(async () => {
      await call("PATCH", `${keysPath}/${key.id}`, { query: { type: "end_user" }, body: { is_active: active } })
      keys.reload()
      return active ? `Key ${key.key_prefix}… enabled.` : `Key ${key.key_prefix}… revoked: its next call is refused (401).`
    })
  return (
    <section class="card">
      <h3>API keys</h3>
      <Show loaded={keys} context="Keys unavailable">
        {(list) => list.data.length === 0 ? <p class="muted">No keys.</p> : (
          <>
            <table data-testid="keys">
              <thead><tr><th>Prefix</th><th>Name</th><th>Scopes</th><th>State</th><th>Created</th><th /></tr></thead>
              <tbody>
                {list.data.map((key) => (
                  <tr key={key.id}>
                    <td><code>{key.key_prefix}…</code></td>
                    <td>{key.name}</td>
                    <td>{key.scopes.join(", ")}</td>
                    <td>{key.is_active ? <Badge tone="good">active</Badge> : <Badge tone="bad">revoked</Badge>}</td>
                    <td><When value={key.created_at} /></td>
                    <td>
                      {key.is_active
                        ? <button type="button" class="danger" disabled={action.busy} onClick={() => setActive(key, false)}>Revoke</button>
                        : <button type="button" class="secondary" disabled={action.busy} onClick={() => setActive(key, true)}>Enable</button>}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
            {list.total > list.limit ? <Pager page={list.page} limit={list.limit} total={list.total} onPage={setPage} /> : null}
          </>
        )}
      </Show>
      <form class="row" onSubmit={create}>
        <input name="name" placeholder="key name (optional)" aria-label="Key name" />
        <button type="submit" disabled={action.busy}>Create key</button>
      </form>
      {action.feedback}
      {created === null ? null : <SecretOnce label="New end-user key" value={created.raw_key} onDone={() => setCreated(null)} />}
    </section>
  )
}

const DisplayWalletCard = ({ base, round }: { base: string; round: number }) => {
  const call = useCall()
  const wallet = useLoad(() => orNull(call<WalletView>("GET", `${base}/wallet`)), [base, round])
  const [initKey, renewInit] = useIdempotencyKey()
  const [topupKey, renewTopup] = useIdempotencyKey()
  const [adjustKey, renewAdjust] = useIdempotencyKey()
  const action = useAction()
  const post = (form: HTMLFormElement, path: string, key: string, renew: () => void, body: Record<string, unknown>, done: string) =>
    void action.run(async () => {
      await call("POST", `${base}/wallet${path}`, { idempotencyKey: key, body })
      renew()
      form.reset()
      wallet.reload()
      return done
    })
  const submit = (handler: (form: HTMLFormElement) => void) => (event: Event) => {
    event.preventDefault()
    handler(event.currentTarget as HTMLFormElement)
  }
  return (
    <section class="card">
      <h3>Display wallet</h3>
      <Show loaded={wallet} context="Display wallet unavailable">
        {(w) => w === null ? <p class="muted">No live budget, so no display wallet.</p> : (
          <>
            {w.display_ledger === null ? <p class="muted">Not initialised for this user.</p> : (
              <dl class="facts">
                <dt>Balance</dt><dd>{formatUnits(w.display_ledger.remaining, w.display_ledger.unit)}</dd>
                <dt>Used / max</dt><dd>{formatUnits(w.display_ledger.used, w.display_ledger.unit)} / {formatUnits(w.display_ledger.max, w.display_ledger.unit)}</dd>
                <dt>Rules</dt><dd>{w.display_ledger.active_rules.map((r) => `${r.trigger}: ${r.amount}`).join(", ") || "none"}</dd>
              </dl>
            )}
            <form class="row" onSubmit={submit((form) => post(form, "", initKey, renewInit, { max_display: field(form, "max_display") }, "Display wallet maximum set."))}>
              <input name="max_display" inputMode="decimal" placeholder="max" required aria-label="Display wallet max" />
              <button type="submit" disabled={action.busy}>{w.display_ledger === null ? "Initialise" : "Set max"}</button>
            </form>
            {w.display_ledger === null ? null : (
              <>
                <form class="row" onSubmit={submit((form) => post(form, "/topup", topupKey, renewTopup, { amount_display: field(form, "amount_display") }, "Display wallet topped up."))}>
                  <input name="amount_display" inputMode="decimal" placeholder="amount" required aria-label="Display top-up amount" />
                  <button type="submit" disabled={action.busy}>Top up</button>
                </form>
                <form class="row" onSubmit={submit((form) => post(form, "/adjust", adjustKey, renewAdjust, { delta: field(form, "delta"), reason: field(form, "reason") }, "Display wallet adjusted."))}>
                  <input name="delta" inputMode="decimal" placeholder="delta (+ gives, − takes)" required aria-label="Display adjust delta" />
                  <input name="reason" placeholder="reason" required aria-label="Display adjust reason" />
                  <button type="submit" class="secondary" disabled={action.busy}>Adjust</button>
                </form>
              </>
            )}
          </>
        )}
      </Show>
      {action.feedback}
    </section>
  )
}

export const EndUserDetail = ({ endUserId }: { endUserId: string }) => {
  const call = useCall()
  const platformId = usePlatformId()
  const base = `/v1/platforms/${platformId}/end-users/${encodeURIComponent(endUserId)}`
  const user = useLoad(() => call<EndUser>("GET", base), [base])
  const [round, setRound] = useState(0)
  const action = useAction()
  const setActive = (active: boolean) =>
    void action.run(async () => {
      await call("PATCH", base, { body: { is_active: active } })
      user.reload()
      return active ? "User reactivated." : "User deactivated: every key of this user is refused (403)."
    })
  return (
    <>
      <p><a href="#/users">← End users</a></p>
      <Show loaded={user} context="End user unavailable">
        {(u) => (
          <>
            <div class="title-row">
              <h2>{u.display_name} <span class="muted">({u.external_id})</span></h2>
              {u.is_active
                ? <button type="button" class="danger" onClick={() => setActive(false)}>Deactivate user</button>
                : <button type="button" onClick={() => setActive(true)}>Reactivate user</button>}
            </div>
            <p class="muted">id <code>{u.id}</code> · created <When value={u.created_at} /> {u.is_active ? null : <Badge tone="bad">inactive</Badge>}</p>
            {action.feedback}
            <div class="cards">
              <BudgetCard base={base} onChange={() => setRound((r) => r + 1)} />
              <DisplayWalletCard base={base} round={round} />
            </div>
            <Ledger base={base} round={round} />
            <div class="cards">
              <KeysCard platformId={platformId} endUserId={u.id} />
              <RateLimitsCard base={base} />
            </div>
          </>
        )}
      </Show>
    </>
  )
}
