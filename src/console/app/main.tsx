// The console's shell: sign-in, the navigation for a platform key or the operator key, and the
// hash routes (#/users/<id>): client routes never reach the server, and never carry the key.
import { render } from "preact"
import { useEffect, useRef, useState } from "preact/hooks"
import "uplot/dist/uPlot.min.css"
import "./app.css"
import { onKeyRefused } from "./api"
import { forgetKey, signIn, storedKey, type Session } from "./session"
import { ErrorBox, Loading, SessionContext } from "./ui"
import { Overview } from "./pages/Overview"
import { EndUsers } from "./pages/EndUsers"
import { EndUserDetail } from "./pages/EndUserDetail"
import { Logs } from "./pages/Logs"
import { Webhooks } from "./pages/Webhooks"
import { Settings } from "./pages/Settings"
import { OperatorFailures, OperatorModels, OperatorPlatforms, OperatorProviders, OperatorUsage } from "./pages/Operator"

const currentRoute = (): ReadonlyArray<string> =>
  location.hash.replace(/^#\/?/, "").split("/").filter((part) => part !== "").map(decodeURIComponent)

const useRoute = (): ReadonlyArray<string> => {
  const [route, setRoute] = useState(currentRoute)
  useEffect(() => {
    const changed = () => setRoute(currentRoute())
    addEventListener("hashchange", changed)
    return () => removeEventListener("hashchange", changed)
  }, [])
  return route
}

const platformNav = [
  ["overview", "Overview"],
  ["users", "End users"],
  ["logs", "Logs"],
  ["webhooks", "Webhooks"],
  ["settings", "Settings"]
] as const

const operatorNav = [
  ["platforms", "Platforms"],
  ["providers", "Providers"],
  ["models", "Models"],
  ["usage", "Usage"],
  ["failures", "Settlement failures"]
] as const

interface Notice {
  readonly error: unknown
  readonly context: string
}

const SignIn = ({ onSignedIn, notice }: { onSignedIn: (session: Session) => void; notice: Notice | undefined }) => {
  const [error, setError] = useState<Notice | undefined>(notice)
  const [busy, setBusy] = useState(false)
  const submit = async (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const input = form.elements.namedItem("key") as HTMLInputElement
    setBusy(true)
    setError(undefined)
    try {
      const session = await signIn(input.value)
      input.value = ""
      onSignedIn(session)
    } catch (failure) {
      setError({ error: failure, context: "Sign-in failed" })
    } finally {
      setBusy(false)
    }
  }
  return (
    <main class="signin">
      <h1>Gateway console</h1>
      <p class="muted">Sign in with a platform key (sk-plat_…) or the operator key (sk-admin_…). The key stays in this tab only.</p>
      <form method="post" onSubmit={submit}>
        <label>
          API key
          <input name="key" type="password" autocomplete="off" spellcheck={false} required placeholder="sk-plat_…" />
        </label>
        <button type="submit" disabled={busy}>{busy ? "Checking…" : "Sign in"}</button>
      </form>
      {error === undefined ? null : <ErrorBox error={error.error} context={error.context} />}
    </main>
  )
}

const PlatformPages = ({ route }: { route: ReadonlyArray<string> }) => {
  const [page = "overview", id] = route
  if (page === "users" && id !== undefined) return <EndUserDetail endUserId={id} />
  if (page === "users") return <EndUsers />
  if (page === "logs") return <Logs />
  if (page === "webhooks") return <Webhooks />
  if (page === "settings") return <Settings />
  return <Overview />
}

const OperatorPages = ({ route }: { route: ReadonlyArray<string> }) => {
  const [page = "platforms"] = route
  if (page === "providers") return <OperatorProviders />
  if (page === "models") return <OperatorModels />
  if (page === "usage") return <OperatorUsage />
  if (page === "failures") return <OperatorFailures />
  return <OperatorPlatforms />
}

const App = () => {
  const [session, setSession] = useState<Session | null>(null)
  const [restoring, setRestoring] = useState(storedKey() !== null)
  const [notice, setNotice] = useState<Notice | undefined>(undefined)
  const route = useRoute()
  // Read by the key-refused handler, registered once: the session of the latest render.
  const signedIn = useRef(false)
  signedIn.current = session !== null

  const signOut = (why?: Notice) => {
    forgetKey()
    setSession(null)
    setNotice(why)
    location.hash = ""
  }

  useEffect(() => {
    // A key revoked or expired while in use: back to the sign-in form, saying why.
    onKeyRefused((error) => {
      if (signedIn.current) signOut({ error, context: "Signed out: the gateway no longer accepts this key" })
    })
    const key = storedKey()
    if (key === null) return
    signIn(key).then(setSession, (error: unknown) => signOut({ error, context: "Sign-in failed" })).finally(() => setRestoring(false))
  }, [])

  if (restoring) return <Loading />
  if (session === null) return <SignIn onSignedIn={setSession} notice={notice} />

  const nav = session.kind === "platform" ? platformNav : operatorNav
  const active = route[0] ?? nav[0][0]
  return (
    <SessionContext.Provider value={session}>
      <header class="top">
        <span class="brand">Gateway console</span>
        <nav>
          {nav.map(([path, label]) => (
            <a href={`#/${path}`} class={active === path ? "active" : ""}>{label}</a>
          ))}
        </nav>
        <span class="who" data-testid="who">
          {session.kind === "platform" ? `Platform ${session.platform.name}` : "Operator"}
        </span>
        <button type="button" class="secondary" onClick={() => signOut()}>Sign out</button>
      </header>
      <main class="page">
        {session.kind === "platform" ? <PlatformPages route={route} /> : <OperatorPages route={route} />}
      </main>
    </SessionContext.Provider>
  )
}

const root = document.getElementById("app")
if (root !== null) render(<App />, root)
