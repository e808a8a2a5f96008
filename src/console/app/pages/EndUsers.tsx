// End users: search by external_id, the table with each user's budget bar (used / max, period,
// suspended), and the form that creates a user (its first key is shown once).
import { useState } from "preact/hooks"
import { ApiError, type Page } from "../api"
import type { ApiKeyCreated, Budget, EndUser } from "../types"
import { Badge, BudgetBar, field, Pager, SecretOnce, Show, Usd, useAction, useCall, useLoad, usePlatformId, When } from "../ui"

const LIMIT = 20

interface Row {
  readonly user: EndUser
  readonly budget: Budget | null
}

export const EndUsers = () => {
  const call = useCall()
  const platformId = usePlatformId()
  const base = `/v1/platforms/${platformId}/end-users`
  const [search, setSearch] = useState("")
  const [page, setPage] = useState(1)
  const [created, setCreated] = useState<{ user: EndUser; key: ApiKeyCreated } | null>(null)
  const create = useAction()

  const rows = useLoad(async () => {
    const users = await call<Page<EndUser>>("GET", base, { query: { external_id: search, page, limit: LIMIT } })
    // A user without a live budget answers 404: the row shows "no budget".
    const budgets = await Promise.all(users.data.map((user) =>
      call<Budget>("GET", `${base}/${user.id}/budget`).catch((error: unknown) => {
        if (error instanceof ApiError && error.status === 404) return null
        throw error
      })
    ))
    return { ...users, rows: users.data.map((user, i): Row => ({ user, budget: budgets[i] ?? null })) }
  }, [search, page, platformId])

  const submitSearch = (event: Event) => {
    event.preventDefault()
    setPage(1)
    setSearch(field(event.currentTarget as HTMLFormElement, "external_id"))
  }

  const submitCreate = (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const externalId = field(form, "external_id")
    const displayName = field(form, "display_name")
    void create.run(async () => {
      const answer = await call<EndUser & { api_key: ApiKeyCreated }>("POST", base, {
        body: { external_id: externalId, ...(displayName === "" ? {} : { display_name: displayName }) }
      })
      form.reset()
      setCreated({ user: answer, key: answer.api_key })
      rows.reload()
      return undefined
    })
  }

  return (
    <>
      <h2>End users</h2>
      <div class="cards">
        <section class="card">
          <h3>Find</h3>
          <form class="row" onSubmit={submitSearch} key={search}>
            <input name="external_id" placeholder="external_id (exact)" aria-label="Search by external_id" defaultValue={search} />
            <button type="submit">Search</button>
            {search === "" ? null : <button type="button" class="secondary" onClick={() => { setSearch(""); setPage(1) }}>Show all</button>}
          </form>
        </section>
        <section class="card">
          <h3>Create an end user</h3>
          <form class="row" onSubmit={submitCreate}>
            <input name="external_id" placeholder="external_id" required aria-label="New external_id" />
            <input name="display_name" placeholder="display name (optional)" aria-label="Display name" />
            <button type="submit" disabled={create.busy}>Create</button>
          </form>
          {create.feedback}
          {created === null ? null : (
            <>
              <p class="ok">Created <a href={`#/users/${created.user.id}`}>{created.user.external_id}</a>.</p>
              <SecretOnce label={`End-user key for ${created.user.external_id}`} value={created.key.raw_key} onDone={() => setCreated(null)} />
            </>
          )}
        </section>
      </div>
      <Show loaded={rows}>
        {(list) => list.rows.length === 0 ? <p class="muted">{search === "" ? "No end users yet." : `No end user with external_id “${search}”.`}</p> : (
          <>
            <table data-testid="end-users">
              <thead>
                <tr><th>External id</th><th>Name</th><th>Budget</th><th class="num">Used / max</th><th>Period</th><th>State</th><th>Created</th></tr>
              </thead>
              <tbody>
                {list.rows.map(({ user, budget }) => (
                  <tr key={user.id}>
                    <td><a href={`#/users/${user.id}`}>{user.external_id}</a></td>
                    <td>{user.display_name}</td>
                    <td>{budget === null ? <span class="muted">no budget</span> : <BudgetBar used={budget.used_usd} max={budget.max_usd} />}</td>
                    <td class="num">{budget === null ? "—" : <><Usd value={budget.used_usd} /> / <Usd value={budget.max_usd} /></>}</td>
                    <td>{budget?.period.replace("_", " ") ?? "—"}</td>
                    <td>
                      {!user.is_active ? <Badge tone="bad">inactive</Badge> : budget?.is_suspended ? <Badge tone="warn">suspended</Badge> : <Badge tone="good">active</Badge>}
                    </td>
                    <td><When value={user.created_at} /></td>
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
