// The web console in a real browser (Debian's Chromium driven by playwright-core) against a real
// gateway: sign-in, end users, budget topup, keys, a model call seen in Logs and on Overview with
// its exact cost, webhooks, revocation, sign-out and the operator pages. Screenshots of every page
// go to test-artifacts/console/ (git-ignored). Also the console's HTTP surface: CSP, caching, the
// redirect from /, and the answer when the bundle is missing.
import { existsSync, mkdirSync, renameSync } from "node:fs"
import { join } from "node:path"
import OpenAI from "openai"
import { chromium, type Browser, type Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { packageFile } from "../layers/lib/PackageRoot.js"
import { CONSOLE_CSP } from "../src/console/ConsoleRoutes.js"
import { formatUsd, sumDecimals } from "../src/console/app/money.js"
import { startReceiver, type WebhookReceiver } from "./fakes/WebhookReceiver.js"
import { catalogMockEcho, createPlatform, type Gateway, ok, startGateway } from "./support/Gateway.js"
import { until } from "./support/Polling.js"

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium"
const ARTIFACTS = packageFile("test-artifacts/console")

let gw: Gateway
let receiver: WebhookReceiver
let browser: Browser
let page: Page
let platformId: string
let platformKey: string
/** Every URL the browser asked for: no key may ever appear in one. */
const requestedUrls: Array<string> = []
/** CSP violations the browser reported, and uncaught errors of the page. */
const pageProblems: Array<string> = []

const shot = (name: string) => page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true })

const open = async (hash: string) => {
  await page.evaluate((target) => {
    location.hash = target
  }, hash)
}

const signIn = async (key: string) => {
  await page.getByLabel("API key").fill(key)
  await page.getByRole("button", { name: "Sign in" }).click()
}

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`Chromium is missing at ${CHROMIUM}: install Debian's chromium package (apt-get install chromium; .ci/run does it) or set CHROMIUM_PATH`)
  }
  if (!existsSync(packageFile("dist/console/index.html"))) {
    throw new Error("dist/console is missing: the test setup runs `npm run build`, which bundles the console")
  }
  mkdirSync(ARTIFACTS, { recursive: true })
  receiver = await startReceiver()
  gw = await startGateway({ env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_WEBHOOK_RETRY_SCHEDULE: "0s,1s" } })
  await catalogMockEcho(gw)
  ;({ platformId, platformKey } = await createPlatform(gw, { name: "Acme" }))
  ok(await gw.call("PUT", `/v1/platforms/${platformId}/provider-keys/mock`, { key: platformKey, body: { api_key: "mock-key" } }))
  ok(await gw.call("POST", `/v1/admin/platforms/${platformId}/platform-wallet/topup`, { key: gw.adminKey, body: { amount_usd: 10 } }))
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"]
  })
  const context = await browser.newContext({ viewport: { width: 1360, height: 900 } })
  page = await context.newPage()
  page.on("request", (request) => requestedUrls.push(request.url()))
  page.on("console", (message) => {
    if (/Content Security Policy|Refused to/.test(message.text())) pageProblems.push(message.text())
  })
  page.on("pageerror", (error) => pageProblems.push(error.message))
  await page.goto(`${gw.baseUrl}/`)
})

afterAll(async () => {
  await browser?.close()
  await gw?.close()
  await receiver?.close()
})

/** What the browser tests created, for the later ones. */
const state: { endUserId?: string; firstKey?: string; secondKey?: string; cost?: string } = {}

describe("the console in Chromium", () => {
  const client = (apiKey: string) => new OpenAI({ apiKey, baseURL: `${gw.baseUrl}/v1`, maxRetries: 0 })
  const chat = (apiKey: string) =>
    client(apiKey).chat.completions.create({ model: "mock-echo", messages: [{ role: "user", content: "Hello from the console test" }] })

  it("/ leads to the sign-in page", async () => {
    expect(new URL(page.url()).pathname).toBe("/console")
    await expect(page.getByRole("heading", { name: "Gateway console" }).isVisible()).resolves.toBe(true)
    await shot("signin")
  })

  it("a wrong key gets a clear sign-in error with the API's code", async () => {
    await signIn(`sk-plat_${"x".repeat(40)}`)
    const alert = page.getByRole("alert")
    await alert.waitFor()
    expect(await alert.textContent()).toMatch(/Sign-in failed: .*invalid_api_key.*HTTP 401/)
    await signIn("hello")
    await page.getByText("This is not a gateway key").waitFor()
    await signIn(`sk-eu_${"y".repeat(40)}`)
    await page.getByText("End-user keys cannot open the console").waitFor()
    await shot("signin-error")
  })

  it("signs in with the platform key, kept in session storage only", async () => {
    await signIn(platformKey)
    await page.getByTestId("who").filter({ hasText: "Platform Acme" }).waitFor()
    expect(await page.evaluate(() => sessionStorage.getItem("gateway-console-key"))).toBe(platformKey)
    expect(await page.evaluate(() => localStorage.length)).toBe(0)
    await page.reload()
    await page.getByTestId("who").filter({ hasText: "Platform Acme" }).waitFor()
  })

  it("registers a webhook endpoint and shows its secret once", async () => {
    await open("#/webhooks")
    await page.getByLabel("Endpoint URL").fill(receiver.url)
    await page.getByRole("button", { name: "Register" }).click()
    const secret = await page.getByTestId("secret").textContent()
    expect(secret).toMatch(/^whsec_/)
    receiver.secret = secret!
    await page.getByRole("button", { name: "I have stored it" }).click()
    await page.getByTestId("endpoints").getByText(receiver.url).waitFor()
    expect(await page.getByTestId("secret").count()).toBe(0)
  })

  it("creates an end user and shows its key once", async () => {
    await open("#/users")
    await page.getByLabel("New external_id").fill("ada")
    await page.getByRole("button", { name: "Create", exact: true }).click()
    state.firstKey = (await page.getByTestId("secret").textContent())!
    expect(state.firstKey).toMatch(/^sk-eu_/)
    await page.getByTestId("end-users").getByRole("link", { name: "ada" }).click()
    await page.getByRole("heading", { name: /ada/ }).waitFor()
    state.endUserId = decodeURIComponent(new URL(page.url()).hash.split("/")[2]!)
    expect(page.url()).not.toContain("sk-")
  })

  it("creates a budget, tops it up and adjusts it, each with its own Idempotency-Key", async () => {
    await page.getByLabel("Budget max USD").fill("5")
    await page.getByRole("button", { name: "Create budget" }).click()
    await page.getByTestId("budget-max").filter({ hasText: "$5.00" }).waitFor()
    await page.getByLabel("Top-up amount USD").fill("2.5")
    await page.getByLabel("Top-up reason").fill("welcome credit")
    await page.getByRole("button", { name: "Top up", exact: true }).first().click()
    await page.getByTestId("budget-max").filter({ hasText: "$7.50" }).waitFor()
    await page.getByTestId("ledger").getByText("welcome credit").waitFor()
    await page.getByLabel("Adjusted max USD").fill("8")
    await page.getByLabel("Adjustment reason").fill("raised")
    await page.getByRole("button", { name: "Adjust", exact: true }).click()
    await page.getByTestId("budget-max").filter({ hasText: "$8.00" }).waitFor()
    await page.getByTestId("ledger").getByText("raised").waitFor()

    const budget = ok(await gw.call("GET", `/v1/platforms/${platformId}/end-users/${state.endUserId}/budget`, { key: platformKey })).body
    expect(budget).toMatchObject({ max_usd: 8, period: "monthly" })
    const rows = ok(await gw.call("GET", `/v1/platforms/${platformId}/end-users/${state.endUserId}/budget/transactions`, { key: platformKey })).body.data
    expect(rows.map((row: { type: string }) => row.type)).toEqual(["opening", "topup", "adjustment"])
    // Each money action sent its own key (stored by the gateway for replays).
    const keys = (await gw.db.pool.query(`SELECT operation, key FROM idempotency_keys WHERE platform_id = $1`, [platformId])).rows
    expect(keys).toHaveLength(3)
    expect(new Set(keys.map((row: { key: string }) => row.key)).size).toBe(3)
    expect(keys.every((row: { key: string }) => row.key.startsWith("console-"))).toBe(true)
    await shot("end-user-detail")
  })

  it("the topup's webhook arrives signed with the secret the console showed", async () => {
    await until(async () => receiver.events.length, (n) => n > 0)
    expect(receiver.events.map((event) => event.body.event_type)).toContain("budget.topped_up")
    await open("#/webhooks")
    await page.getByRole("button", { name: "Deliveries" }).click()
    const deliveries = page.getByTestId("deliveries")
    const topped = deliveries.getByRole("cell", { name: "budget.topped_up", exact: true })
    await topped.waitFor()
    await topped.click()
    await page.locator("table.nested").getByText("delivered").waitFor()
    await shot("webhooks")
  })

  it("a call through the mock model shows in Logs with its exact cost", async () => {
    const completion = await chat(state.firstKey!)
    expect(completion.choices[0]?.message.content).toBeTruthy()
    const logs = ok(await gw.call("GET", `/v1/platforms/${platformId}/logs`, { key: platformKey })).body.data
    expect(logs).toHaveLength(1)
    state.cost = logs[0].estimated_cost_usd as string
    expect(Number(state.cost)).toBeGreaterThan(0)

    await open("#/logs")
    const table = page.getByTestId("logs")
    await table.getByText("mock-echo").waitFor()
    await table.getByRole("link", { name: "ada" }).waitFor()
    await table.getByText("mock-echo").click()
    const detail = page.getByTestId("log-detail")
    await detail.waitFor()
    expect(await detail.getByTestId("log-cost").textContent()).toBe(formatUsd(state.cost))
    expect(await detail.textContent()).toContain(logs[0].metadata.x_request_id)
    expect(await detail.textContent()).toContain("billed")
    await shot("logs")

    await page.getByLabel("Model").fill("no-such-model")
    await page.getByRole("button", { name: "Filter" }).click()
    await page.getByText("No calls match.").waitFor()
    await page.getByLabel("Model").fill("")
    await page.getByLabel("End user").fill("ada")
    await page.getByLabel("Type").selectOption("chat.completion")
    await page.getByRole("button", { name: "Filter" }).click()
    await table.getByText("mock-echo").waitFor()
  })

  it("Overview shows the wallet balance after the call", async () => {
    const wallet = ok(await gw.call("GET", `/v1/platforms/${platformId}/platform-wallet`, { key: platformKey })).body
    await open("#/overview")
    await page.getByTestId("wallet-balance").filter({ hasText: formatUsd(String(wallet.balance_usd)) }).waitFor()
  })

  it("Overview reports a usage API error in plain words", async () => {
    await page.route("**/usage?**", (route) =>
      route.fulfill({
        status: 404,
        contentType: "application/json",
        body: JSON.stringify({ error: { message: "Not found", type: "invalid_request_error", code: "not_found", param: null } })
      }))
    await open("#/logs")
    await open("#/overview")
    const alert = page.getByRole("alert")
    await alert.waitFor()
    expect(await alert.textContent()).toMatch(/Usage is not available: Not found.*not_found.*HTTP 404/)
    await page.getByTestId("wallet-balance").waitFor()
    await shot("overview-usage-error")
    await page.unroute("**/usage?**")
  })

  // Needs GET /v1/platforms/{pid}/usage (issue 35, point 1).
  it("Overview shows the call's spend with the exact cost (usage API)", async () => {
    await open("#/logs")
    await open("#/overview")
    await page.getByTestId("total-spend").waitFor({ timeout: 10_000 })
    expect(await page.getByTestId("total-spend").textContent()).toBe(formatUsd(state.cost!))
    expect(await page.getByTestId("total-calls").textContent()).toBe("1")
    await page.getByText("Top end users by spend").waitFor()
    await page.locator("section", { hasText: "Top end users by spend" }).getByText("ada").waitFor()
    await page.locator("section", { hasText: "Top models by spend" }).getByText("mock-echo").waitFor()
    await page.getByTestId("daily-chart").locator("canvas").waitFor()
    await shot("overview")
  })

  it("creates a second key, revokes the first, and the first's next call is refused (401)", async () => {
    await open(`#/users/${state.endUserId}`)
    await page.getByRole("button", { name: "Create key" }).click()
    state.secondKey = (await page.getByTestId("secret").textContent())!
    expect(state.secondKey).toMatch(/^sk-eu_/)
    const firstRow = page.getByTestId("keys").locator("tr", { hasText: state.firstKey!.slice(0, 12) })
    await firstRow.getByRole("button", { name: "Revoke" }).click()
    await firstRow.getByText("revoked").waitFor()

    const refused = await chat(state.firstKey!).then(() => undefined, (error: unknown) => error)
    expect(refused).toBeInstanceOf(OpenAI.AuthenticationError)
    expect((refused as InstanceType<typeof OpenAI.AuthenticationError>).status).toBe(401)
    await expect(chat(state.secondKey)).resolves.toBeTruthy()
  })

  it("suspends and resumes the budget", async () => {
    await page.getByRole("button", { name: "Suspend" }).click()
    await page.getByText("Budget suspended").waitFor()
    const refused = await chat(state.secondKey!).then(() => undefined, (error: unknown) => error)
    expect((refused as { status?: number }).status).toBe(402)
    await page.getByRole("button", { name: "Resume" }).click()
    await page.getByText("Budget resumed.").waitFor()
    await expect(chat(state.secondKey!)).resolves.toBeTruthy()
  })

  it("rate limits and the display wallet of an end user", async () => {
    ok(await gw.call("PATCH", `/v1/platforms/${platformId}`, { key: platformKey, body: { settings: { end_user_wallet: { enabled: true, unit: "gems" } } } }))
    await open("#/users")
    await open(`#/users/${state.endUserId}`)
    await page.getByLabel("Requests per minute").fill("5")
    await page.getByRole("button", { name: "Set", exact: true }).click()
    await page.getByText("5 requests/min").waitFor()
    expect(ok(await gw.call("GET", `/v1/platforms/${platformId}/end-users/${state.endUserId}/rate-limits`, { key: platformKey })).body)
      .toEqual({ rpm_limit: 5, tpm_limit: null, rpd_limit: null, resolution: "explicit" })
    await page.getByRole("button", { name: "Use default" }).click()
    await page.getByText("no limits set").waitFor()

    await page.getByLabel("Display wallet max").fill("100")
    await page.getByRole("button", { name: "Initialise" }).click()
    await page.getByText("0 gems / 100 gems").waitFor()
    await page.getByLabel("Display top-up amount").fill("50")
    await page.getByRole("button", { name: "Top up", exact: true }).nth(1).click()
    await page.getByText("Display wallet topped up.").waitFor()
    await page.getByLabel("Display adjust delta").fill("-10")
    await page.getByLabel("Display adjust reason").fill("correction")
    await page.getByRole("button", { name: "Adjust", exact: true }).nth(1).click()
    await page.getByText("Display wallet adjusted.").waitFor()
    const wallet = ok(await gw.call("GET", `/v1/platforms/${platformId}/end-users/${state.endUserId}/wallet`, { key: platformKey })).body
    expect(wallet.display_ledger).toMatchObject({ unit: "gems", max: 150, used: 10, remaining: 140 })
    await page.getByText("140 gems").waitFor()
    await shot("end-user-wallet")
  })

  it("end users: search by external_id, budget bars", async () => {
    await open("#/users")
    await page.getByLabel("Search by external_id").fill("ada")
    await page.getByRole("button", { name: "Search" }).click()
    await page.getByTestId("end-users").locator(".bar").waitFor()
    await page.getByLabel("Search by external_id").fill("nobody")
    await page.getByRole("button", { name: "Search" }).click()
    await page.getByText("No end user with external_id").waitFor()
    await page.getByRole("button", { name: "Show all" }).click()
    await page.getByTestId("end-users").getByRole("link", { name: "ada" }).waitFor()
    await shot("end-users")
  })

  it("settings: a refused change shows the API's error, provider key lookup, the capabilities policy, tool apps", async () => {
    await open("#/settings")
    await page.getByLabel("Default monthly budget for new end users (USD, empty for none)").fill("lots")
    await page.getByRole("button", { name: "Save", exact: true }).click()
    const refusal = page.getByRole("alert")
    await refusal.waitFor()
    expect(await refusal.textContent()).toMatch(/validation_error · field settings\.default_budget_usd · HTTP 422/)
    await page.getByLabel("Default monthly budget for new end users (USD, empty for none)").fill("")
    // A saved choice shows again when the page is opened anew (and is what the next save sends).
    await page.getByLabel("Budget enforcement").selectOption("reserve")
    await page.getByRole("button", { name: "Save", exact: true }).click()
    await page.getByText("Settings saved.").waitFor()
    expect(ok(await gw.call("GET", `/v1/platforms/${platformId}`, { key: platformKey })).body.settings.budget_enforcement).toBe("reserve")
    await open("#/logs")
    await open("#/settings")
    expect(await page.getByLabel("Budget enforcement").inputValue()).toBe("reserve")
    await page.getByLabel("Budget enforcement").selectOption("optimistic")
    await page.getByRole("button", { name: "Save", exact: true }).click()
    await page.getByText("Settings saved.").waitFor()
    await page.getByLabel("Provider slug to look up").fill("mock")
    await page.getByRole("button", { name: "Look up" }).click()
    await page.getByText("key ending").waitFor()
    await page.getByLabel("Price ceiling per run (USD, empty for none)").fill("0.5")
    await page.getByRole("button", { name: "Save policy" }).click()
    await page.getByText("Capabilities policy saved.").waitFor()
    const platform = ok(await gw.call("GET", `/v1/platforms/${platformId}`, { key: platformKey })).body
    expect(platform.settings.capabilities.max_price_usd).toBe(0.5)

    await page.getByLabel("OAuth client id").fill("gh-client")
    await page.getByLabel("OAuth client secret").fill("gh-secret")
    await page.getByLabel("Your web app's base URL (the OAuth landing route lives there)").fill("http://127.0.0.1:9/app")
    await page.getByRole("button", { name: "Activate" }).click()
    const apps = page.getByTestId("tool-apps")
    await apps.locator("tr", { hasText: "github" }).getByText("active").waitFor()
    expect(await apps.textContent()).not.toContain("gh-secret")
    await shot("settings")
  })

  it("signs out: storage and page cleared", async () => {
    await page.getByRole("button", { name: "Sign out" }).click()
    await page.getByLabel("API key").waitFor()
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0)
    await page.reload()
    await page.getByLabel("API key").waitFor()
  })

  it("a platform key revoked while in use signs the console out, saying why", async () => {
    const spare = ok(await gw.call("POST", `/v1/platforms/${platformId}/api-keys`, { key: platformKey, body: { name: "console" } }), 201).body
    await signIn(spare.raw_key)
    await page.getByTestId("who").filter({ hasText: "Platform Acme" }).waitFor()
    ok(await gw.call("DELETE", `/v1/platforms/${platformId}/api-keys/${spare.id}`, { key: platformKey }), 204)
    await open("#/logs")
    const alert = page.getByRole("alert")
    await alert.waitFor()
    expect(await alert.textContent()).toMatch(/Signed out: the gateway no longer accepts this key: .*invalid_api_key · HTTP 401/)
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0)
  })

  it("the operator's pages: platforms with a wallet topup, providers, models with prices and routing", async () => {
    await signIn(gw.adminKey)
    await page.getByTestId("who").filter({ hasText: "Operator" }).waitFor()
    await page.getByTestId("platforms").getByText("Acme").waitFor()
    await page.getByLabel("Top-up for Acme").fill("1.25")
    await page.getByRole("button", { name: "Top up wallet" }).click()
    await page.getByText("Added $1.25 to Acme").waitFor()
    await shot("operator-platforms")
    await open("#/providers")
    await page.getByTestId("providers").locator("tr", { hasText: "http://mock.invalid" }).waitFor()
    await shot("operator-providers")
    await open("#/models")
    const models = page.getByTestId("models")
    await models.getByText("mock-echo").waitFor()
    expect(await models.textContent()).toContain("$1.00")
    expect(await models.textContent()).toContain("$2.00")
    await shot("operator-models")
    await open("#/failures")
    await page.getByTestId("no-failures").waitFor()
  })

  // Needs GET /v1/admin/usage (issue 35, point 1).
  it("the operator's usage across platforms shows each platform's exact spend (usage API)", async () => {
    const logs = ok(await gw.call("GET", `/v1/platforms/${platformId}/logs?limit=100`, { key: platformKey })).body.data
    const spent = sumDecimals(logs.map((row: { estimated_cost_usd: string }) => row.estimated_cost_usd))
    await open("#/usage")
    const row = page.getByTestId("usage").locator("tr", { hasText: "Acme" })
    await row.waitFor({ timeout: 10_000 })
    expect(await row.locator("td").last().textContent()).toBe(formatUsd(spent))
    expect(await row.locator("td").nth(1).textContent()).toBe(String(logs.length))
    await shot("operator-usage")
    await page.getByRole("button", { name: "Sign out" }).click()
  })

  it("no key ever appeared in a URL, and the page logged no errors (no CSP violation)", () => {
    expect(requestedUrls.length).toBeGreaterThan(0)
    expect(requestedUrls.filter((url) => /sk-(plat|admin|eu)_/.test(url))).toEqual([])
    expect(pageProblems).toEqual([])
  })
})

describe("the console's HTTP surface", () => {
  const securityHeaders = (res: Response) => {
    expect(res.headers.get("content-security-policy")).toBe(CONSOLE_CSP)
    expect(res.headers.get("x-content-type-options")).toBe("nosniff")
    expect(res.headers.get("referrer-policy")).toBe("no-referrer")
    expect(res.headers.get("access-control-allow-origin")).toBeNull()
  }

  it("GET / redirects to /console", async () => {
    const res = await fetch(`${gw.baseUrl}/`, { redirect: "manual" })
    expect(res.status).toBe(302)
    expect(res.headers.get("location")).toBe("/console")
  })

  it("serves the page and its hashed assets with a strict CSP, types and caching", async () => {
    const res = await fetch(`${gw.baseUrl}/console`)
    expect(res.status).toBe(200)
    expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8")
    expect(res.headers.get("cache-control")).toBe("no-cache")
    securityHeaders(res)
    expect(CONSOLE_CSP).toContain("script-src 'self'")
    expect(CONSOLE_CSP).toContain("frame-ancestors 'none'")
    const html = await res.text()
    expect(html).not.toMatch(/<script>|<script(?![^>]*\bsrc=)[^>]*>|style=/)
    const etag = res.headers.get("etag")!
    expect((await fetch(`${gw.baseUrl}/console`, { headers: { "if-none-match": etag } })).status).toBe(304)

    const assets = [...html.matchAll(/(?:src|href)="(\/console\/assets\/[^"]+)"/g)].map((m) => m[1]!)
    expect(assets.map((path) => path.slice(path.lastIndexOf(".")))).toEqual([".css", ".js"])
    for (const path of assets) {
      const asset = await fetch(`${gw.baseUrl}${path}`)
      expect(asset.status).toBe(200)
      expect(asset.headers.get("content-type")).toBe(path.endsWith(".js") ? "text/javascript; charset=utf-8" : "text/css; charset=utf-8")
      expect(asset.headers.get("cache-control")).toContain("immutable")
      securityHeaders(asset)
    }
    const missing = await fetch(`${gw.baseUrl}/console/assets/..%2Fpackage.json`)
    expect(missing.status).toBe(404)
    expect((await fetch(`${gw.baseUrl}/console/assets/app-NOPE.js`)).status).toBe(404)
  })

  it("GET /v1/platform tells a platform key its platform; other keys get 403", async () => {
    const own = ok(await gw.call("GET", "/v1/platform", { key: platformKey })).body
    expect(own.id).toBe(platformId)
    expect(own.name).toBe("Acme")
    expect((await gw.call("GET", "/v1/platform", { key: gw.adminKey })).status).toBe(403)
    const user = ok(await gw.call("POST", `/v1/platforms/${platformId}/end-users`, { key: platformKey, body: { external_id: "probe" } }), 201).body
    expect((await gw.call("GET", "/v1/platform", { key: user.api_key.raw_key })).status).toBe(403)
    expect((await gw.call("GET", "/v1/platform")).status).toBe(401)
  })

  it("lists the platform's tool-app activations with their connections, never the secret", async () => {
    const apps = ok(await gw.call("GET", `/v1/platforms/${platformId}/mcp/apps`, { key: platformKey })).body
    expect(apps.data).toEqual([expect.objectContaining({ app_slug: "github", base_url: "http://127.0.0.1:9/app", is_active: true, connections: 0, needs_reauth: 0 })])
    expect(JSON.stringify(apps)).not.toMatch(/gh-secret|gh-client/)
    const other = await createPlatform(gw, { name: "Other" })
    expect((await gw.call("GET", `/v1/platforms/${platformId}/mcp/apps`, { key: other.platformKey })).status).toBe(404)
    expect(ok(await gw.call("GET", `/v1/platforms/${other.platformId}/mcp/apps`, { key: other.platformKey })).body.data).toEqual([])
  })

  it("lists one end user's keys", async () => {
    const keys = (query: string) => gw.call("GET", `/v1/platforms/${platformId}/api-keys?type=end_user&${query}`, { key: platformKey }).then((res) => ok(res).body)
    const ada = await keys(`end_user_id=${state.endUserId}`)
    expect(ada.total).toBe(2)
    expect(ada.data.every((key: { end_user_id: string }) => key.end_user_id === state.endUserId)).toBe(true)
    expect((await keys("")).total).toBeGreaterThan(2)
    expect((await keys("end_user_id=not-an-id")).total).toBe(0)
  })

  it("filters logs by type, status and time range", async () => {
    const logs = (query: string) => gw.call("GET", `/v1/platforms/${platformId}/logs?${query}`, { key: platformKey }).then((res) => ok(res).body)
    const all = await logs("")
    expect(all.total).toBeGreaterThan(0)
    expect((await logs("request_type=chat.completion")).total).toBe(all.total)
    expect((await logs("request_type=embedding")).total).toBe(0)
    expect((await logs("status=success")).total).toBe(all.total)
    expect((await logs("status=error")).total).toBe(0)
    const first = all.data[all.data.length - 1].created_at as string
    expect((await logs(`from=${encodeURIComponent(first)}`)).total).toBe(all.total)
    expect((await logs(`to=${encodeURIComponent(first)}`)).total).toBe(0)
    expect((await logs("from=2999-01-01T00:00:00Z")).total).toBe(0)
    expect((await gw.call("GET", `/v1/platforms/${platformId}/logs?from=yesterday`, { key: platformKey })).status).toBe(422)
  })

  it("without a bundle, /console says to run npm run build", async () => {
    const dist = packageFile("dist/console")
    const hidden = `${dist}.hidden-by-test`
    renameSync(dist, hidden)
    try {
      const res = await fetch(`${gw.baseUrl}/console`)
      expect(res.status).toBe(503)
      expect(await res.text()).toContain("npm run build")
      securityHeaders(res)
    } finally {
      renameSync(hidden, dist)
    }
  })
})
