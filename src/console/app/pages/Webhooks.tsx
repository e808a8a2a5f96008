// Webhooks: the platform's endpoints (a new endpoint's signing secret is shown once), and per
// endpoint its deliveries, one per event, each opening its attempts.
import { Fragment } from "preact"
import { useState } from "preact/hooks"
import type { Page } from "../api"
import type { WebhookAttempt, WebhookDelivery, WebhookEndpoint } from "../types"
import { Badge, field, Pager, SecretOnce, Show, useAction, useCall, useLoad, usePlatformId, When } from "../ui"

const EVENT_TYPES = ["budget.topped_up", "budget.low_balance", "budget.suspended", "budget.unsuspended", "budget.debited"]
const DEFAULT_TYPES = EVENT_TYPES.filter((type) => type !== "budget.debited")

const deliveryTone = (status: string) => (status === "delivered" ? "good" : status === "failed" ? "bad" : "warn")

const Attempts = ({ path }: { path: string }) => {
  const call = useCall()
  const attempts = useLoad(() => call<Page<WebhookAttempt>>("GET", path, { query: { limit: 100 } }), [path])
  return (
    <Show loaded={attempts} context="Attempts unavailable">
      {(list) => (
        <table class="nested">
          <thead><tr><th>Attempt</th><th>When</th><th>Result</th><th>HTTP</th><th>Error</th><th>Next try</th></tr></thead>
          <tbody>
            {list.data.map((a) => (
              <tr key={a.id}>
                <td>{a.attempt}</td><td><When value={a.created_at} /></td>
                <td><Badge tone={deliveryTone(a.status)}>{a.status}</Badge></td>
                <td>{a.http_status ?? "no answer"}</td><td>{a.error ?? ""}</td><td><When value={a.next_attempt_at} /></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Show>
  )
}

const Deliveries = ({ endpoint, base }: { endpoint: WebhookEndpoint; base: string }) => {
  const call = useCall()
  const [page, setPage] = useState(1)
  const [open, setOpen] = useState<string | null>(null)
  const path = `${base}/${endpoint.id}/deliveries`
  const deliveries = useLoad(() => call<Page<WebhookDelivery>>("GET", path, { query: { page, limit: 20 } }), [path, page])
  return (
    <section class="card">
      <div class="title-row">
        <h3>Deliveries to {endpoint.url}</h3>
        <button type="button" class="secondary" onClick={deliveries.reload}>Refresh</button>
      </div>
      <Show loaded={deliveries} context="Deliveries unavailable">
        {(list) => list.data.length === 0 ? <p class="muted">No events sent to this endpoint yet.</p> : (
          <>
            <table class="clickable" data-testid="deliveries">
              <thead><tr><th>Event</th><th>Type</th><th>Status</th><th>Attempts</th><th>Last HTTP</th><th>Last error</th><th>Next try</th><th>Created</th></tr></thead>
              <tbody>
                {list.data.map((d) => (
                  <Fragment key={d.id}>
                    <tr tabIndex={0} onClick={() => setOpen(open === d.id ? null : d.id)} onKeyDown={(e) => { if (e.key === "Enter") setOpen(open === d.id ? null : d.id) }}>
                      <td><code>{d.event_id}</code></td><td>{d.event_type}</td>
                      <td><Badge tone={deliveryTone(d.status)}>{d.status}</Badge></td>
                      <td>{d.attempt}</td><td>{d.http_status ?? "—"}</td><td>{d.last_error ?? ""}</td>
                      <td><When value={d.next_attempt_at} /></td><td><When value={d.created_at} /></td>
                    </tr>
                    {open === d.id ? <tr><td colSpan={8}><Attempts path={`${path}/${d.id}/attempts`} /></td></tr> : null}
                  </Fragment>
                ))}
              </tbody>
            </table>
            <Pager page={list.page} limit={list.limit} total={list.total} onPage={setPage} />
          </>
        )}
      </Show>
    </section>
  )
}

export const Webhooks = () => {
  const call = useCall()
  const platformId = usePlatformId()
  const base = `/v1/platforms/${platformId}/webhook-endpoints`
  const [page, setPage] = useState(1)
  const endpoints = useLoad(() => call<Page<WebhookEndpoint>>("GET", base, { query: { page, limit: 20 } }), [base, page])
  const [selected, setSelected] = useState<WebhookEndpoint | null>(null)
  const [secret, setSecret] = useState<string | null>(null)
  const action = useAction()

  const create = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const eventTypes = EVENT_TYPES.filter((type) => field(form, type) === "true")
    void action.run(async () => {
      const created = await call<WebhookEndpoint & { secret: string }>("POST", base, { body: { url: field(form, "url"), event_types: eventTypes } })
      setSecret(created.secret)
      form.reset()
      endpoints.reload()
      return `Endpoint ${created.url} registered.`
    })
  }

  const remove = (endpoint: WebhookEndpoint) => {
    if (!confirm(`Delete the endpoint ${endpoint.url} and its pending deliveries?`)) return
    void action.run(async () => {
      await call("DELETE", `${base}/${endpoint.id}`)
      if (selected?.id === endpoint.id) setSelected(null)
      endpoints.reload()
      return "Endpoint deleted."
    })
  }

  return (
    <>
      <h2>Webhooks</h2>
      <section class="card">
        <h3>Register an endpoint</h3>
        <form onSubmit={create}>
          <div class="row">
            <input name="url" type="url" placeholder="https://example.com/hooks/gateway" required aria-label="Endpoint URL" class="grow" />
            <button type="submit" disabled={action.busy}>Register</button>
          </div>
          <div class="row">
            {EVENT_TYPES.map((type) => (
              <label class="inline"><input type="checkbox" name={type} defaultChecked={DEFAULT_TYPES.includes(type)} /> {type}</label>
            ))}
          </div>
        </form>
        {action.feedback}
        {secret === null ? null : <SecretOnce label="Signing secret" value={secret} onDone={() => setSecret(null)} />}
      </section>
      <Show loaded={endpoints} context="Endpoints unavailable">
        {(list) => list.data.length === 0 ? <p class="muted">No endpoints.</p> : (
          <>
            <table data-testid="endpoints">
              <thead><tr><th>URL</th><th>Events</th><th>State</th><th>Created</th><th /></tr></thead>
              <tbody>
                {list.data.map((endpoint) => (
                  <tr key={endpoint.id} class={selected?.id === endpoint.id ? "selected" : ""}>
                    <td>{endpoint.url}</td>
                    <td>{endpoint.event_types.join(", ")}</td>
                    <td>{endpoint.is_active ? <Badge tone="good">active</Badge> : <Badge tone="bad">inactive</Badge>}</td>
                    <td><When value={endpoint.created_at} /></td>
                    <td>
                      <div class="row">
                        <button type="button" class="secondary" onClick={() => setSelected(endpoint)}>Deliveries</button>
                        <button type="button" class="danger" onClick={() => remove(endpoint)}>Delete</button>
                      </div>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
            <Pager page={list.page} limit={list.limit} total={list.total} onPage={setPage} />
          </>
        )}
      </Show>
      {selected === null ? null : <Deliveries endpoint={selected} base={base} />}
    </>
  )
}
