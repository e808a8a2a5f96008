// Logs: the platform's inference log, filtered by end user, model, type, status, billing status
// and UTC dates (all filters applied by the API); a row opens its detail.
import { useState } from "preact/hooks"
import type { Page } from "../api"
import type { EndUser, LogEntry } from "../types"
import { Badge, field, Pager, Show, Usd, useCall, useLoad, usePlatformId, When } from "../ui"

const LIMIT = 25
const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i
const REQUEST_TYPES = ["chat.completion", "response", "agent", "embedding", "messages", "mcp_tool", "capability"]

interface Filters {
  readonly user: string
  readonly model: string
  readonly request_type: string
  readonly status: string
  readonly billing_status: string
  readonly from: string
  readonly to: string
}

const noFilters: Filters = { user: "", model: "", request_type: "", status: "", billing_status: "", from: "", to: "" }

/** A UTC day (yyyy-mm-dd) as the start of that day, or of the next one for the `to` bound. */
const dayStart = (day: string, next: boolean) =>
  day === "" ? undefined : new Date(Date.parse(`${day}T00:00:00Z`) + (next ? 86_400_000 : 0)).toISOString()

const statusTone = (entry: LogEntry) => (entry.status === "success" ? "good" : entry.status === "interrupted" ? "warn" : "bad")

const Detail = ({ entry, userLabel, onClose }: { entry: LogEntry; userLabel: string; onClose: () => void }) => {
  const requestId = entry.metadata["x_request_id"]
  const responseId = entry.metadata["request_id"]
  return (
    <section class="card detail" data-testid="log-detail" aria-label="Log entry">
      <div class="title-row">
        <h3>Call {entry.id}</h3>
        <button type="button" class="secondary" onClick={onClose}>Close</button>
      </div>
      <dl class="facts">
        <dt>When</dt><dd><When value={entry.created_at} /></dd>
        <dt>End user</dt><dd>{userLabel}</dd>
        <dt>Type</dt><dd>{entry.request_type}</dd>
        <dt>Model</dt><dd>{entry.model ?? "—"} {entry.provider_model_id === null ? null : <span class="muted">(upstream {entry.provider_model_id})</span>}</dd>
        <dt>Provider</dt><dd>{entry.provider ?? "—"}</dd>
        <dt>Status</dt><dd><Badge tone={statusTone(entry)}>{entry.status}</Badge> {entry.error_message ?? ""}</dd>
        <dt>Tokens</dt><dd>{entry.prompt_tokens} in · {entry.completion_tokens} out · {entry.total_tokens} total ({entry.token_count_method})</dd>
        <dt>Cost</dt><dd data-testid="log-cost"><Usd value={entry.estimated_cost_usd} /></dd>
        <dt>Billing</dt><dd>{entry.billing_status}</dd>
        <dt>Latency</dt><dd>{entry.latency_ms} ms</dd>
        <dt>Request id</dt><dd><code>{typeof requestId === "string" ? requestId : "—"}</code></dd>
        <dt>Completion / response id</dt><dd><code>{typeof responseId === "string" ? responseId : "—"}</code></dd>
      </dl>
      <details>
        <summary>Metadata</summary>
        <pre>{JSON.stringify(entry.metadata, null, 2)}</pre>
      </details>
    </section>
  )
}

export const Logs = () => {
  const call = useCall()
  const platformId = usePlatformId()
  const base = `/v1/platforms/${platformId}`
  const [filters, setFilters] = useState<Filters>(noFilters)
  const [page, setPage] = useState(1)
  const [open, setOpen] = useState<LogEntry | null>(null)

  const logs = useLoad(async () => {
    // The API filters by end-user id; an external_id is looked up first.
    let endUserId: string | undefined
    let user: EndUser | undefined
    if (filters.user !== "") {
      if (uuid.test(filters.user)) endUserId = filters.user
      else {
        const found = await call<Page<EndUser>>("GET", `${base}/end-users`, { query: { external_id: filters.user, limit: 1 } })
        user = found.data[0]
        if (user === undefined) return { page: { data: [], total: 0, page: 1, limit: LIMIT }, unknownUser: true, user, externalIds: new Map<string, string>() }
        endUserId = user.id
      }
    }
    const answer = await call<Page<LogEntry>>("GET", `${base}/logs`, {
      query: {
        end_user_id: endUserId,
        model: filters.model,
        request_type: filters.request_type,
        status: filters.status,
        billing_status: filters.billing_status,
        from: dayStart(filters.from, false),
        to: dayStart(filters.to, true),
        page,
        limit: LIMIT
      }
    })
    // Rows carry the end user's id; the table shows their external_id (one read per user shown).
    const ids = [...new Set(answer.data.flatMap((entry) => (entry.end_user_id === null ? [] : [entry.end_user_id])))]
    const users = await Promise.all(ids.map((id) => call<EndUser>("GET", `${base}/end-users/${id}`).catch(() => null)))
    const externalIds = new Map(users.flatMap((u) => (u === null ? [] : [[u.id, u.external_id] as const])))
    return { page: answer, unknownUser: false, user, externalIds }
  }, [filters, page, platformId])

  const apply = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    setPage(1)
    setOpen(null)
    setFilters({
      user: field(form, "user"),
      model: field(form, "model"),
      request_type: field(form, "request_type"),
      status: field(form, "status"),
      billing_status: field(form, "billing_status"),
      from: field(form, "from"),
      to: field(form, "to")
    })
  }

  return (
    <>
      <h2>Logs</h2>
      <form class="filters" onSubmit={apply} onReset={() => { setFilters(noFilters); setPage(1) }}>
        <input name="user" placeholder="end user: external_id or id" aria-label="End user" />
        <input name="model" placeholder="model slug" aria-label="Model" />
        <select name="request_type" aria-label="Type">
          <option value="">any type</option>
          {REQUEST_TYPES.map((type) => <option value={type}>{type}</option>)}
        </select>
        <select name="status" aria-label="Status">
          <option value="">any status</option>
          <option value="success">success</option>
          <option value="error">error</option>
          <option value="interrupted">interrupted</option>
        </select>
        <select name="billing_status" aria-label="Billing status">
          <option value="">any billing</option>
          <option value="billed">billed</option>
          <option value="estimated">estimated</option>
          <option value="not_billed">not billed</option>
          <option value="failed">failed</option>
        </select>
        <label class="inline">From <input name="from" type="date" aria-label="From (UTC day)" /></label>
        <label class="inline">To <input name="to" type="date" aria-label="To (UTC day, included)" /></label>
        <button type="submit">Filter</button>
        <button type="reset" class="secondary">Clear</button>
      </form>
      {open === null ? null : (
        <Detail
          entry={open}
          userLabel={open.end_user_id === null ? "platform key" : `${logs.data?.externalIds.get(open.end_user_id) ?? ""} (${open.end_user_id})`}
          onClose={() => setOpen(null)}
        />
      )}
      <Show loaded={logs} context="Logs unavailable">
        {({ page: list, unknownUser, externalIds }) => unknownUser ? <p class="muted">No end user with external_id “{filters.user}”.</p> : list.data.length === 0 ? <p class="muted">No calls match.</p> : (
          <>
            <table class="clickable" data-testid="logs">
              <thead>
                <tr><th>When</th><th>Type</th><th>Model</th><th>End user</th><th>Status</th><th class="num">Tokens</th><th class="num">Cost</th><th>Billing</th><th class="num">Latency</th></tr>
              </thead>
              <tbody>
                {list.data.map((entry) => (
                  <tr key={entry.id} tabIndex={0} class={open?.id === entry.id ? "selected" : ""}
                    onClick={() => setOpen(entry)} onKeyDown={(e) => { if (e.key === "Enter") setOpen(entry) }}>
                    <td><When value={entry.created_at} /></td>
                    <td>{entry.request_type}</td>
                    <td>{entry.model ?? "—"}</td>
                    <td>{entry.end_user_id === null ? <span class="muted">platform key</span> : <a href={`#/users/${entry.end_user_id}`} onClick={(e) => e.stopPropagation()}>{externalIds.get(entry.end_user_id) ?? `${entry.end_user_id.slice(0, 8)}…`}</a>}</td>
                    <td><Badge tone={statusTone(entry)}>{entry.status}</Badge></td>
                    <td class="num">{entry.total_tokens}</td>
                    <td class="num"><Usd value={entry.estimated_cost_usd} /></td>
                    <td>{entry.billing_status}</td>
                    <td class="num">{entry.latency_ms} ms</td>
                  </tr>
                ))}
              </tbody>
            </table>
            <Pager page={list.page} limit={list.limit} total={list.total} onPage={setPage} />
          </>
        )}
      </Show>
    </>
  )
}
