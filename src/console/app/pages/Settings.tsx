// Settings of the platform: general settings, provider keys, tool-app activation, the
// capabilities policy (with the catalog as this platform sees it) and skills.
import { useState } from "preact/hooks"
import { ApiError } from "../api"
import type { CapabilitySummary, Platform, ProviderKey } from "../types"
import { Badge, field, Show, Usd, useAction, useCall, useLoad, usePlatformId, When } from "../ui"

/** An amount field of the settings (JSON numbers there): empty is null; text that is no number goes as typed, for the API to refuse. */
const amountOrNull = (text: string): number | string | null => (text === "" ? null : Number.isFinite(Number(text)) ? Number(text) : text)

const list = (text: string) => text.split(",").map((item) => item.trim()).filter((item) => item !== "")

const General = ({ platform, onSaved }: { platform: Platform; onSaved: () => void }) => {
  const call = useCall()
  const action = useAction()
  const save = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const budget = field(form, "default_budget_usd")
    void action.run(async () => {
      await call("PATCH", `/v1/platforms/${platform.id}`, {
        body: {
          name: field(form, "name"),
          skills_enabled: field(form, "skills_enabled") === "true",
          settings: { default_budget_usd: amountOrNull(budget), budget_enforcement: field(form, "budget_enforcement") }
        }
      })
      onSaved()
      return "Settings saved."
    })
  }
  const settings = platform.settings as { default_budget_usd?: string | null; budget_enforcement?: string }
  return (
    <section class="card">
      <h3>Platform</h3>
      <p class="muted">id <code>{platform.id}</code> · created <When value={platform.created_at} /></p>
      <form class="stack" onSubmit={save}>
        <label>Name <input name="name" defaultValue={platform.name} required /></label>
        <label>Default monthly budget for new end users (USD, empty for none)
          <input name="default_budget_usd" inputMode="decimal" defaultValue={settings.default_budget_usd ?? ""} />
        </label>
        <label>Budget enforcement
          <select name="budget_enforcement">
            <option value="optimistic">optimistic: admit while money remains</option>
            <option value="reserve" selected={settings.budget_enforcement === "reserve"}>reserve: hold each call's maximum cost first</option>
          </select>
        </label>
        <label class="inline"><input type="checkbox" name="skills_enabled" defaultChecked={platform.skills_enabled} /> Skills: offer the skills tools on each user's MCP URL</label>
        <button type="submit" disabled={action.busy}>Save</button>
      </form>
      <p class="muted">Skills themselves are written and reviewed by end users through the MCP tools; the API has no listing of them.</p>
      {action.feedback}
    </section>
  )
}

const ProviderKeys = ({ platformId }: { platformId: string }) => {
  const call = useCall()
  const [slug, setSlug] = useState("")
  const base = `/v1/platforms/${platformId}/provider-keys`
  const record = useLoad(async () => {
    if (slug === "") return undefined
    return call<ProviderKey>("GET", `${base}/${encodeURIComponent(slug)}`).catch((error: unknown) => {
      if (error instanceof ApiError && error.status === 404) return null
      throw error
    })
  }, [slug])
  const action = useAction()
  const save = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const provider = field(form, "provider")
    void action.run(async () => {
      await call("PUT", `${base}/${encodeURIComponent(provider)}`, { body: { api_key: field(form, "api_key") } })
      form.reset()
      setSlug(provider)
      record.reload()
      return `Key stored for ${provider}.`
    })
  }
  const remove = () =>
    void action.run(async () => {
      await call("DELETE", `${base}/${encodeURIComponent(slug)}`)
      record.reload()
      return `Key for ${slug} deleted: this platform's models of that provider are no longer offered.`
    })
  return (
    <section class="card">
      <h3>Provider keys</h3>
      <form class="row" onSubmit={(event) => { event.preventDefault(); setSlug(field(event.currentTarget as HTMLFormElement, "slug")) }}>
        <input name="slug" placeholder="provider slug, e.g. openai" required aria-label="Provider slug to look up" />
        <button type="submit" class="secondary">Look up</button>
      </form>
      {slug === "" ? null : (
        <Show loaded={record} context="Provider key unavailable">
          {(key) => key === null || key === undefined ? <p class="muted">No key stored for {slug}.</p> : (
            <p>
              {key.provider}: key ending <code>…{key.key_hint}</code> {key.is_active ? <Badge tone="good">active</Badge> : <Badge tone="bad">inactive</Badge>} · updated <When value={key.updated_at} />{" "}
              <button type="button" class="danger" onClick={remove}>Delete</button>
            </p>
          )}
        </Show>
      )}
      <form class="row" onSubmit={save}>
        <input name="provider" placeholder="provider slug" required aria-label="Provider slug" />
        <input name="api_key" type="password" autocomplete="off" placeholder="provider API key" required aria-label="Provider API key" />
        <button type="submit" disabled={action.busy}>Store key</button>
      </form>
      <p class="muted">Keys are stored encrypted; the gateway shows only their last four characters.</p>
      {action.feedback}
    </section>
  )
}

interface ToolAppActivation {
  readonly app_slug: string
  readonly base_url: string
  readonly is_active: boolean
  readonly connections: number
  readonly needs_reauth: number
  readonly created_at: string
}

const ToolApps = ({ platformId }: { platformId: string }) => {
  const call = useCall()
  const apps = useLoad(() => call<{ data: ReadonlyArray<ToolAppActivation> }>("GET", `/v1/platforms/${platformId}/mcp/apps`), [platformId])
  const action = useAction()
  const activate = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const app = field(form, "app_slug")
    void action.run(async () => {
      await call("POST", `/v1/platforms/${platformId}/mcp/apps`, {
        body: { app_slug: app, client_id: field(form, "client_id"), client_secret: field(form, "client_secret"), base_url: field(form, "base_url") }
      })
      form.reset()
      apps.reload()
      return `${app} is active for this platform's end users.`
    })
  }
  return (
    <section class="card">
      <h3>Tool apps</h3>
      <Show loaded={apps} context="Tool apps unavailable">
        {(list) => list.data.length === 0 ? <p class="muted">No tool app activated.</p> : (
          <table data-testid="tool-apps">
            <thead><tr><th>App</th><th>Landing base URL</th><th>State</th><th class="num">Connected users</th><th class="num">To reconnect</th><th>Since</th></tr></thead>
            <tbody>
              {list.data.map((app) => (
                <tr key={app.app_slug}>
                  <td>{app.app_slug}</td><td>{app.base_url}</td>
                  <td>{app.is_active ? <Badge tone="good">active</Badge> : <Badge tone="bad">inactive</Badge>}</td>
                  <td class="num">{app.connections}</td><td class="num">{app.needs_reauth}</td><td><When value={app.created_at} /></td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Show>
      <form class="stack" onSubmit={activate}>
        <label>App
          <select name="app_slug">
            <option value="github">GitHub</option>
            <option value="slack">Slack</option>
            <option value="gmail">Gmail</option>
            <option value="zendesk">Zendesk</option>
          </select>
        </label>
        <label>OAuth client id <input name="client_id" required /></label>
        <label>OAuth client secret <input name="client_secret" type="password" autocomplete="off" required /></label>
        <label>Your web app's base URL (the OAuth landing route lives there) <input name="base_url" type="url" required /></label>
        <button type="submit" disabled={action.busy}>Activate</button>
      </form>
      <p class="muted">
        Activating an app again updates its credentials. Each end user connects their own account
        through the tool service with their key; the table counts their live connections.
      </p>
      {action.feedback}
    </section>
  )
}

const Capabilities = ({ platform, onSaved }: { platform: Platform; onSaved: () => void }) => {
  const call = useCall()
  const catalog = useLoad(() => call<{ enabled: boolean; capabilities: ReadonlyArray<CapabilitySummary> }>("GET", "/v1/capabilities"), [platform])
  const policy = platform.settings.capabilities ?? {}
  const action = useAction()
  const save = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const ceiling = field(form, "max_price_usd")
    const allowlist = field(form, "allowlist")
    void action.run(async () => {
      await call("PATCH", `/v1/platforms/${platform.id}`, {
        body: {
          settings: {
            capabilities: {
              enabled: field(form, "enabled") === "true",
              max_price_usd: amountOrNull(ceiling),
              allowlist: allowlist === "" ? null : list(allowlist),
              denylist: list(field(form, "denylist")),
              charge_failed_calls: field(form, "charge_failed_calls") === "true"
            }
          }
        }
      })
      onSaved()
      return "Capabilities policy saved."
    })
  }
  return (
    <section class="card">
      <h3>Capabilities</h3>
      <form class="stack" onSubmit={save}>
        <label class="inline"><input type="checkbox" name="enabled" defaultChecked={policy.enabled === true} /> Enabled for this platform's end users</label>
        <label>Price ceiling per run (USD, empty for none) <input name="max_price_usd" inputMode="decimal" defaultValue={policy.max_price_usd ?? ""} /></label>
        <label>Allowlist (capability or provider slugs, comma-separated; empty: everything) <input name="allowlist" defaultValue={policy.allowlist?.join(", ") ?? ""} /></label>
        <label>Denylist (comma-separated) <input name="denylist" defaultValue={policy.denylist?.join(", ") ?? ""} /></label>
        <label class="inline"><input type="checkbox" name="charge_failed_calls" defaultChecked={policy.charge_failed_calls !== false} /> Charge runs the provider answered with an error</label>
        <button type="submit" disabled={action.busy}>Save policy</button>
      </form>
      {action.feedback}
      <Show loaded={catalog} context="Catalog unavailable">
        {(c) => c.capabilities.length === 0 ? <p class="muted">The catalog is empty.</p> : (
          <table>
            <thead><tr><th>Capability</th><th class="num">Providers</th><th class="num">In policy</th><th class="num">From</th></tr></thead>
            <tbody>
              {c.capabilities.map((cap) => (
                <tr key={cap.slug}><td>{cap.name} <span class="muted">({cap.slug})</span></td><td class="num">{cap.provider_count}</td><td class="num">{cap.in_policy_count}</td><td class="num"><Usd value={cap.min_price_usd} /></td></tr>
              ))}
            </tbody>
          </table>
        )}
      </Show>
    </section>
  )
}

export const Settings = () => {
  const call = useCall()
  const platformId = usePlatformId()
  const platform = useLoad(() => call<Platform>("GET", `/v1/platforms/${platformId}`), [platformId])
  return (
    <>
      <h2>Settings</h2>
      <Show loaded={platform} context="Platform unavailable">
        {(p) => (
          <>
            <div class="cards">
              <General platform={p} onSaved={platform.reload} />
              <ProviderKeys platformId={p.id} />
            </div>
            <div class="cards">
              <Capabilities platform={p} onSaved={platform.reload} />
              <ToolApps platformId={p.id} />
            </div>
          </>
        )}
      </Show>
    </>
  )
}
