// Operator pages (sk-admin_ key): platforms (create, top up their wallets), providers, models
// with prices and routing, usage across platforms, and settlement failures.
import { useState } from "preact/hooks"
import { newIdempotencyKey, type Page } from "../api"
import { compareDecimals, formatUsd } from "../money"
import type { ApiKeyCreated, LogEntry, ModelConfig, Platform, Provider, Usage } from "../types"
import { Badge, ErrorBox, field, Loading, Pager, SecretOnce, Show, Usd, useAction, useCall, useLoad, When } from "../ui"

const WalletTopup = ({ platform }: { platform: Platform }) => {
  const call = useCall()
  const [key, setKey] = useState(newIdempotencyKey)
  const action = useAction()
  const topup = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const amount = field(form, "amount_usd")
    const reason = field(form, "reason")
    void action.run(async () => {
      const wallet = await call<{ balance_usd: string }>("POST", `/v1/admin/platforms/${platform.id}/platform-wallet/topup`, {
        idempotencyKey: key,
        body: { amount_usd: amount, ...(reason === "" ? {} : { reason }) }
      })
      setKey(newIdempotencyKey())
      form.reset()
      return `Added ${formatUsd(amount)} to ${platform.name}: balance ${formatUsd(wallet.balance_usd)}.`
    })
  }
  return (
    <>
      <form class="row" onSubmit={topup}>
        <input name="amount_usd" inputMode="decimal" placeholder="USD" required aria-label={`Top-up for ${platform.name}`} />
        <input name="reason" placeholder="reason" aria-label="Top-up reason" />
        <button type="submit" disabled={action.busy}>Top up wallet</button>
      </form>
      {action.feedback}
    </>
  )
}

export const OperatorPlatforms = () => {
  const call = useCall()
  const [page, setPage] = useState(1)
  const platforms = useLoad(() => call<Page<Platform>>("GET", "/v1/admin/platforms", { query: { page, limit: 20 } }), [page])
  const [created, setCreated] = useState<{ platform: Platform; api_key: ApiKeyCreated } | null>(null)
  const action = useAction()
  const create = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    void action.run(async () => {
      setCreated(await call("POST", "/v1/admin/platforms", { body: { name: field(form, "name") } }))
      form.reset()
      platforms.reload()
      return undefined
    })
  }
  return (
    <>
      <h2>Platforms</h2>
      <section class="card">
        <h3>Create a platform</h3>
        <form class="row" onSubmit={create}>
          <input name="name" placeholder="name" required aria-label="Platform name" />
          <button type="submit" disabled={action.busy}>Create</button>
        </form>
        {action.feedback}
        {created === null ? null : <SecretOnce label={`Platform key of ${created.platform.name}`} value={created.api_key.raw_key} onDone={() => setCreated(null)} />}
      </section>
      <Show loaded={platforms} context="Platforms unavailable">
        {(list) => (
          <>
            <table data-testid="platforms">
              <thead><tr><th>Name</th><th>Id</th><th>Created</th><th>Platform wallet</th></tr></thead>
              <tbody>
                {list.data.map((p) => (
                  <tr key={p.id}><td>{p.name}</td><td><code>{p.id}</code></td><td><When value={p.created_at} /></td><td><WalletTopup platform={p} /></td></tr>
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

export const OperatorProviders = () => {
  const call = useCall()
  const providers = useLoad(() => call<{ data: ReadonlyArray<Provider> }>("GET", "/v1/admin/providers"), [])
  const action = useAction()
  const upsert = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    void action.run(async () => {
      const saved = await call<Provider>("POST", "/v1/admin/providers", {
        body: { slug: field(form, "slug"), kind: field(form, "kind"), base_url: field(form, "base_url") }
      })
      form.reset()
      providers.reload()
      return `Provider ${saved.slug} saved.`
    })
  }
  return (
    <>
      <h2>Providers</h2>
      <section class="card">
        <h3>Add or change a provider</h3>
        <form class="row" onSubmit={upsert}>
          <input name="slug" placeholder="slug" required aria-label="Provider slug" />
          <select name="kind" aria-label="Provider kind">
            <option value="openai">openai (chat completions)</option>
            <option value="openai-responses">openai-responses</option>
            <option value="anthropic">anthropic</option>
            <option value="mock">mock</option>
          </select>
          <input name="base_url" type="url" placeholder="https://api.example.com/v1" required aria-label="Base URL" class="grow" />
          <button type="submit" disabled={action.busy}>Save</button>
        </form>
        {action.feedback}
      </section>
      <Show loaded={providers} context="Providers unavailable">
        {(list) => (
          <table data-testid="providers">
            <thead><tr><th>Slug</th><th>Kind</th><th>Base URL</th></tr></thead>
            <tbody>{list.data.map((p) => <tr key={p.id}><td>{p.slug}</td><td>{p.kind}</td><td>{p.base_url}</td></tr>)}</tbody>
          </table>
        )}
      </Show>
    </>
  )
}

type Route = ModelConfig["providers"][number]
const emptyRoute: Route = { provider: "", provider_model_id: "", priority: 0, weight: 1, enabled: true, input_usd_per_mtok: "0", output_usd_per_mtok: "0" }

const ModelEditor = ({ model, onSaved }: { model: ModelConfig | null; onSaved: () => void }) => {
  const call = useCall()
  const [routes, setRoutes] = useState<ReadonlyArray<Route>>(model?.providers ?? [emptyRoute])
  const action = useAction()
  const save = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const providers = routes.map((_, i) => ({
      provider: field(form, `provider-${i}`),
      provider_model_id: field(form, `provider_model_id-${i}`),
      priority: Number(field(form, `priority-${i}`)),
      weight: Number(field(form, `weight-${i}`)),
      enabled: field(form, `enabled-${i}`) === "true",
      // Prices travel as decimal strings: exact whatever their digits.
      input_usd_per_mtok: field(form, `input-${i}`),
      output_usd_per_mtok: field(form, `output-${i}`)
    }))
    const serves = ["chat", "embeddings"].filter((op) => field(form, `serves-${op}`) === "true")
    void action.run(async () => {
      const saved = await call<ModelConfig>("POST", "/v1/admin/models", {
        body: { slug: field(form, "slug"), serves, agent: field(form, "agent") === "true", providers }
      })
      onSaved()
      return `Model ${saved.slug} saved.`
    })
  }
  return (
    <form onSubmit={save} class="stack">
      <div class="row">
        <input name="slug" placeholder="model slug" required defaultValue={model?.slug ?? ""} aria-label="Model slug" />
        <label class="inline"><input type="checkbox" name="serves-chat" defaultChecked={model?.serves.includes("chat") ?? true} /> chat</label>
        <label class="inline"><input type="checkbox" name="serves-embeddings" defaultChecked={model?.serves.includes("embeddings") ?? false} /> embeddings</label>
        <label class="inline"><input type="checkbox" name="agent" defaultChecked={model?.agent ?? false} /> agent</label>
      </div>
      <table>
        <thead><tr><th>Provider</th><th>Upstream model id</th><th>Priority</th><th>Weight</th><th>Enabled</th><th>Input $/Mtok</th><th>Output $/Mtok</th><th /></tr></thead>
        <tbody>
          {routes.map((route, i) => (
            <tr key={`${i}-${routes.length}`}>
              <td><input name={`provider-${i}`} defaultValue={route.provider} required aria-label="Provider" /></td>
              <td><input name={`provider_model_id-${i}`} defaultValue={route.provider_model_id} required aria-label="Upstream model id" /></td>
              <td><input name={`priority-${i}`} type="number" defaultValue={String(route.priority)} class="narrow" aria-label="Priority" /></td>
              <td><input name={`weight-${i}`} type="number" min="0" defaultValue={String(route.weight)} class="narrow" aria-label="Weight" /></td>
              <td><input name={`enabled-${i}`} type="checkbox" defaultChecked={route.enabled} aria-label="Enabled" /></td>
              <td><input name={`input-${i}`} inputMode="decimal" defaultValue={route.input_usd_per_mtok} class="narrow" aria-label="Input price" /></td>
              <td><input name={`output-${i}`} inputMode="decimal" defaultValue={route.output_usd_per_mtok} class="narrow" aria-label="Output price" /></td>
              <td><button type="button" class="secondary" onClick={() => setRoutes(routes.filter((_, j) => j !== i))}>Remove</button></td>
            </tr>
          ))}
        </tbody>
      </table>
      <div class="row">
        <button type="button" class="secondary" onClick={() => setRoutes([...routes, emptyRoute])}>Add provider</button>
        <button type="submit" disabled={action.busy}>Save model</button>
      </div>
      {action.feedback}
    </form>
  )
}

export const OperatorModels = () => {
  const call = useCall()
  const models = useLoad(() => call<{ data: ReadonlyArray<ModelConfig> }>("GET", "/v1/admin/models"), [])
  const [editing, setEditing] = useState<ModelConfig | null | "new">(null)
  return (
    <>
      <div class="title-row">
        <h2>Models</h2>
        <button type="button" onClick={() => setEditing("new")}>Add a model</button>
      </div>
      {editing === null ? null : (
        <section class="card">
          <h3>{editing === "new" ? "New model" : `Edit ${editing.slug}`}</h3>
          <ModelEditor key={editing === "new" ? "new" : editing.id} model={editing === "new" ? null : editing} onSaved={() => { setEditing(null); models.reload() }} />
        </section>
      )}
      <Show loaded={models} context="Models unavailable">
        {(list) => (
          <table data-testid="models">
            <thead><tr><th>Model</th><th>Serves</th><th>Provider</th><th>Upstream id</th><th class="num">Priority</th><th class="num">Weight</th><th class="num">Input $/Mtok</th><th class="num">Output $/Mtok</th><th /></tr></thead>
            <tbody>
              {list.data.flatMap((model) =>
                (model.providers.length === 0 ? [null] : [...model.providers].sort((a, b) => a.priority - b.priority)).map((route, i) => (
                  <tr key={`${model.id}-${i}`}>
                    <td>{i === 0 ? <strong>{model.slug}</strong> : null}{i === 0 && model.agent ? <> <Badge tone="plain">agent</Badge></> : null}</td>
                    <td>{i === 0 ? model.serves.join(", ") : null}</td>
                    <td>{route?.provider ?? "—"} {route !== null && !route.enabled ? <Badge tone="bad">disabled</Badge> : null}</td>
                    <td>{route?.provider_model_id ?? ""}</td>
                    <td class="num">{route?.priority ?? ""}</td>
                    <td class="num">{route?.weight ?? ""}</td>
                    <td class="num">{route === null ? "" : <Usd value={route.input_usd_per_mtok} />}</td>
                    <td class="num">{route === null ? "" : <Usd value={route.output_usd_per_mtok} />}</td>
                    <td>{i === 0 ? <button type="button" class="secondary" onClick={() => setEditing(model)}>Edit</button> : null}</td>
                  </tr>
                )))}
            </tbody>
          </table>
        )}
      </Show>
    </>
  )
}

/** Platform names by id (the first hundred platforms), for tables that name a row's platform. */
const usePlatformNames = (): Map<string, string> => {
  const call = useCall()
  const platforms = useLoad(() => call<Page<Platform>>("GET", "/v1/admin/platforms", { query: { limit: 100 } }), [])
  return new Map((platforms.data?.data ?? []).map((p) => [p.id, p.name]))
}

export const OperatorUsage = () => {
  const call = useCall()
  const [days, setDays] = useState(30)
  const usage = useLoad(() => {
    const end = Date.now()
    return call<Usage>("GET", "/v1/admin/usage", {
      query: { from: new Date(end - days * 86_400_000).toISOString(), to: new Date(end).toISOString(), group_by: "platform" }
    })
  }, [days])
  const names = usePlatformNames()
  return (
    <>
      <div class="title-row">
        <h2>Usage across platforms</h2>
        <select value={String(days)} onChange={(e) => setDays(Number((e.currentTarget as HTMLSelectElement).value))} aria-label="Range">
          <option value="7">Last 7 days</option>
          <option value="30">Last 30 days</option>
          <option value="90">Last 90 days</option>
        </select>
      </div>
      {usage.error !== undefined ? <ErrorBox error={usage.error} context="Usage is not available" /> : usage.data === undefined ? <Loading /> : (
        <table data-testid="usage">
          <thead><tr><th>Platform</th><th class="num">Calls</th><th class="num">Errors</th><th class="num">Input tokens</th><th class="num">Output tokens</th><th class="num">Spend</th></tr></thead>
          <tbody>
            {[...usage.data.data].sort((a, b) => compareDecimals(b.cost_usd, a.cost_usd)).map((row) => (
              <tr key={row.key}><td>{names.get(row.key) ?? row.key}</td><td class="num">{row.calls}</td><td class="num">{row.errors}</td><td class="num">{row.input_tokens}</td><td class="num">{row.output_tokens}</td><td class="num"><Usd value={row.cost_usd} /></td></tr>
            ))}
            <tr class="total"><td>All platforms</td><td class="num">{usage.data.totals.calls}</td><td class="num">{usage.data.totals.errors}</td><td class="num">{usage.data.totals.input_tokens}</td><td class="num">{usage.data.totals.output_tokens}</td><td class="num"><Usd value={usage.data.totals.cost_usd} /></td></tr>
          </tbody>
        </table>
      )}
    </>
  )
}

/** Calls whose settlement could not be written after its retries: nothing was debited for them. */
export const OperatorFailures = () => {
  const call = useCall()
  const [page, setPage] = useState(1)
  const failures = useLoad(() => call<Page<LogEntry & { platform_id: string }>>("GET", "/v1/admin/settlement-failures", { query: { page, limit: 25 } }), [page])
  const names = usePlatformNames()
  return (
    <>
      <h2>Settlement failures</h2>
      <p class="muted">Calls answered to the client whose ledger rows could not be written after their retries: they were not debited.</p>
      <Show loaded={failures} context="Settlement failures unavailable">
        {(list) => list.data.length === 0 ? <p class="muted" data-testid="no-failures">No settlement failures.</p> : (
          <>
            <table data-testid="failures">
              <thead><tr><th>When</th><th>Platform</th><th>Model</th><th>Type</th><th class="num">Cost</th><th>Why</th></tr></thead>
              <tbody>
                {list.data.map((row) => (
                  <tr key={row.id}>
                    <td><When value={row.created_at} /></td><td>{names.get(row.platform_id) ?? row.platform_id}</td>
                    <td>{row.model ?? "—"}</td><td>{row.request_type}</td><td class="num"><Usd value={row.estimated_cost_usd} /></td><td>{row.error_message ?? ""}</td>
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
