// Overview: spend and calls per day, errors, the top end users and models by spend, and the
// platform wallet with its runway at the last seven days' spend. All figures come from the usage
// API and the wallet; sums and ratios are exact (money.ts).
import { useState } from "preact/hooks"
import { DailyChart } from "../Chart"
import { compareDecimals, runwayDays, sumDecimals } from "../money"
import type { PlatformWallet, Usage, UsageBucket } from "../types"
import { ErrorBox, Loading, Show, Usd, useCall, useLoad, usePlatformId } from "../ui"

const DAY = 86_400_000
const BURN_DAYS = 7
const TOP = 5

/** [from, to) covering the last `days` UTC days, today included. */
const rangeOf = (days: number) => {
  const today = new Date()
  const end = Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate()) + DAY
  return { from: new Date(end - days * DAY).toISOString(), to: new Date(end).toISOString() }
}

/** Days as people read them: beyond ten years the exact figure says nothing more. */
const runwayText = (days: string) =>
  Number(days) >= 3650 ? "more than 10 years" : `about ${days} days`

const topBySpend = (buckets: ReadonlyArray<UsageBucket>, count: number) =>
  [...buckets].filter((b) => b.calls > 0).sort((a, b) => compareDecimals(b.cost_usd, a.cost_usd)).slice(0, count)

const TopTable = ({ title, buckets, label }: { title: string; buckets: ReadonlyArray<UsageBucket>; label: (b: UsageBucket) => string }) => (
  <section class="card">
    <h3>{title}</h3>
    {buckets.length === 0 ? <p class="muted">No calls in this range.</p> : (
      <table>
        <thead><tr><th>Name</th><th class="num">Calls</th><th class="num">Spend</th></tr></thead>
        <tbody>
          {buckets.map((bucket) => (
            <tr key={bucket.key}><td>{label(bucket)}</td><td class="num">{bucket.calls}</td><td class="num"><Usd value={bucket.cost_usd} /></td></tr>
          ))}
        </tbody>
      </table>
    )}
  </section>
)

export const Overview = () => {
  const call = useCall()
  const platformId = usePlatformId()
  const [days, setDays] = useState(30)
  const base = `/v1/platforms/${platformId}`
  const usage = useLoad(async () => {
    const query = rangeOf(days)
    const [byDay, byModel, byUser] = await Promise.all([
      call<Usage>("GET", `${base}/usage`, { query: { ...query, group_by: "day" } }),
      // The API answers the costliest buckets first.
      call<Usage>("GET", `${base}/usage`, { query: { ...query, group_by: "model", limit: TOP } }),
      call<Usage>("GET", `${base}/usage`, { query: { ...query, group_by: "end_user", limit: TOP } })
    ])
    return { byDay, byModel, byUser }
  }, [days, platformId])
  const wallet = useLoad(() => call<PlatformWallet>("GET", `${base}/platform-wallet`), [platformId])

  const burn = usage.data === undefined || days < BURN_DAYS
    ? undefined
    : sumDecimals(usage.data.byDay.data.slice(-BURN_DAYS).map((bucket) => bucket.cost_usd))

  return (
    <>
      <div class="title-row">
        <h2>Overview</h2>
        <label class="inline">
          Range
          <select value={String(days)} onChange={(e) => setDays(Number((e.currentTarget as HTMLSelectElement).value))}>
            <option value="7">Last 7 days</option>
            <option value="30">Last 30 days</option>
            <option value="90">Last 90 days</option>
          </select>
        </label>
      </div>
      <div class="cards">
        <section class="card stat">
          <h3>Platform wallet</h3>
          <Show loaded={wallet} context="Wallet unavailable">
            {(w) => (
              <>
                <p class="big" data-testid="wallet-balance"><Usd value={w.balance_usd} /></p>
                {burn === undefined ? null : (
                  <p class="muted" data-testid="runway">
                    {(() => {
                      const runway = runwayDays(w.balance_usd, burn, BURN_DAYS)
                      return runway === null
                        ? "No spend in the last 7 days: no runway to estimate."
                        : <>Runway {runwayText(runway)} at the last 7 days' spend (<Usd value={burn} />).</>
                    })()}
                  </p>
                )}
              </>
            )}
          </Show>
        </section>
        {usage.data === undefined ? null : (
          <>
            <section class="card stat">
              <h3>Spend</h3>
              <p class="big" data-testid="total-spend"><Usd value={usage.data.byDay.totals.cost_usd} /></p>
              <p class="muted">{usage.data.byDay.totals.input_tokens} input / {usage.data.byDay.totals.output_tokens} output tokens</p>
            </section>
            <section class="card stat">
              <h3>Calls</h3>
              <p class="big" data-testid="total-calls">{usage.data.byDay.totals.calls}</p>
              <p class={usage.data.byDay.totals.errors > 0 ? "warn-text" : "muted"} data-testid="total-errors">
                {usage.data.byDay.totals.errors === 1 ? "1 error" : `${usage.data.byDay.totals.errors} errors`}
              </p>
            </section>
          </>
        )}
      </div>
      {usage.error !== undefined ? <ErrorBox error={usage.error} context="Usage is not available" /> : usage.data === undefined ? <Loading /> : (
        <>
          <section class="card">
            <h3>Spend and calls per day (UTC)</h3>
            <DailyChart buckets={usage.data.byDay.data} />
          </section>
          <div class="cards">
            <TopTable title="Top end users by spend" buckets={topBySpend(usage.data.byUser.data, TOP)} label={(b) => b.external_id ?? (b.key || "Platform keys (no end user)")} />
            <TopTable title="Top models by spend" buckets={topBySpend(usage.data.byModel.data, TOP)} label={(b) => b.key} />
          </div>
        </>
      )}
    </>
  )
}
