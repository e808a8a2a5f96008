// Building blocks shared by the pages: the session context, data loading, error display,
// one-time secrets, money, dates, budget bars and pagination.
import { createContext, type ComponentChildren } from "preact"
import { useCallback, useContext, useEffect, useState } from "preact/hooks"
import { ApiError, request, type Method, type RequestOptions } from "./api"
import { formatUsd, share } from "./money"
import type { Session } from "./session"

export const SessionContext = createContext<Session | null>(null)

export const useSession = (): Session => {
  const session = useContext(SessionContext)
  if (session === null) throw new Error("no session")
  return session
}

/** The platform of a platform-key session (the pages under it are reached only with one). */
export const usePlatformId = (): string => {
  const session = useSession()
  return session.kind === "platform" ? session.platform.id : ""
}

export const useCall = () => {
  const session = useSession()
  return useCallback(
    <T,>(method: Method, path: string, options?: RequestOptions) => request<T>(session.key, method, path, options),
    [session.key]
  )
}

export interface Loaded<T> {
  readonly data: T | undefined
  readonly error: unknown
  readonly loading: boolean
  readonly reload: () => void
}

/** Runs `load` when `deps` change (and on reload); the latest answer wins. */
export const useLoad = <T,>(load: () => Promise<T>, deps: ReadonlyArray<unknown>): Loaded<T> => {
  const [state, setState] = useState<{ data: T | undefined; error: unknown; loading: boolean }>({
    data: undefined,
    error: undefined,
    loading: true
  })
  const [round, setRound] = useState(0)
  useEffect(() => {
    let current = true
    setState((previous) => ({ ...previous, loading: true }))
    load().then(
      (data) => current && setState({ data, error: undefined, loading: false }),
      (error: unknown) => current && setState({ data: undefined, error, loading: false })
    )
    return () => {
      current = false
    }
  }, [...deps, round])
  return { ...state, reload: () => setRound((r) => r + 1) }
}

/** An error in plain words: the gateway's message, its code and the HTTP status. */
export const describeError = (error: unknown): { message: string; detail: string } => {
  if (error instanceof ApiError) {
    const parts = [error.code]
    if (error.param !== null) parts.push(`field ${error.param}`)
    if (error.status > 0) parts.push(`HTTP ${error.status}`)
    return { message: error.message, detail: parts.join(" · ") }
  }
  return { message: error instanceof Error ? error.message : String(error), detail: "console_error" }
}

export const ErrorBox = ({ error, context }: { error: unknown; context?: string }) => {
  if (error === undefined || error === null) return null
  const { message, detail } = describeError(error)
  return (
    <div class="error" role="alert">
      {context === undefined ? null : <strong>{context}: </strong>}
      {message} <code class="code">{detail}</code>
    </div>
  )
}

export const Loading = () => <p class="muted">Loading…</p>

/** Data, or its loading state, or its error. */
export const Show = <T,>({ loaded, context, children }: {
  loaded: Loaded<T>
  context?: string
  children: (data: T) => ComponentChildren
}) => {
  if (loaded.error !== undefined) return <ErrorBox error={loaded.error} {...(context === undefined ? {} : { context })} />
  if (loaded.data === undefined) return <Loading />
  return <>{children(loaded.data)}</>
}

export const Usd = ({ value }: { value: string | null | undefined }) => <span class="money">{formatUsd(value)}</span>

/** Times in UTC, like the API's timestamps and its daily buckets. */
export const formatTime = (iso: string | null | undefined): string =>
  iso === null || iso === undefined ? "—" : `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`

export const When = ({ value }: { value: string | null | undefined }) => <time dateTime={value ?? ""}>{formatTime(value)}</time>

export const BudgetBar = ({ used, max }: { used: string; max: string }) => {
  const part = share(used, max)
  return (
    <div class="bar" title={`${formatUsd(used)} of ${formatUsd(max)}`}>
      <div class={part >= 1 ? "bar-fill full" : part >= 0.8 ? "bar-fill high" : "bar-fill"} style={{ width: `${part * 100}%` }} />
    </div>
  )
}

/** A secret the API shows once (raw keys, webhook secrets). */
export const SecretOnce = ({ label, value, onDone }: { label: string; value: string; onDone: () => void }) => (
  <div class="secret" role="status">
    <p>
      <strong>{label}</strong> — shown only this once. Copy it now; the gateway keeps only a hash.
    </p>
    <code class="secret-value" data-testid="secret">{value}</code>
    <div class="row">
      <button type="button" onClick={() => void navigator.clipboard?.writeText(value)}>Copy</button>
      <button type="button" class="secondary" onClick={onDone}>I have stored it</button>
    </div>
  </div>
)

/**
 * One API action behind a form: disables itself while running, shows the API's error or a
 * confirmation. `run` answers the confirmation text.
 */
export const useAction = () => {
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState<unknown>(undefined)
  const [done, setDone] = useState<string | undefined>(undefined)
  const run = async (action: () => Promise<string | undefined>): Promise<boolean> => {
    setBusy(true)
    setError(undefined)
    setDone(undefined)
    try {
      setDone(await action())
      return true
    } catch (failure) {
      setError(failure)
      return false
    } finally {
      setBusy(false)
    }
  }
  const feedback = (
    <>
      <ErrorBox error={error} />
      {done === undefined ? null : <p class="ok" role="status">{done}</p>}
    </>
  )
  return { busy, run, feedback }
}

export const Pager = ({ page, limit, total, onPage }: { page: number; limit: number; total: number; onPage: (page: number) => void }) => {
  const pages = Math.max(1, Math.ceil(total / limit))
  return (
    <div class="pager">
      <button type="button" class="secondary" disabled={page <= 1} onClick={() => onPage(page - 1)}>Previous</button>
      <span>Page {page} of {pages} · {total} in all</span>
      <button type="button" class="secondary" disabled={page >= pages} onClick={() => onPage(page + 1)}>Next</button>
    </div>
  )
}

/** The value of a form field by name. */
export const field = (form: HTMLFormElement, name: string): string => {
  const element = form.elements.namedItem(name)
  if (element instanceof HTMLInputElement && element.type === "checkbox") return element.checked ? "true" : ""
  return element instanceof HTMLInputElement || element instanceof HTMLSelectElement || element instanceof HTMLTextAreaElement
    ? element.value.trim()
    : ""
}

export const Badge = ({ tone, children }: { tone: "good" | "bad" | "warn" | "plain"; children: ComponentChildren }) => (
  <span class={`badge ${tone}`}>{children}</span>
)
