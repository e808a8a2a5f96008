// SSRF guard: address classification, URL checks (odd IPv4 spellings, schemes), no redirect
// following on the gateway's outbound paths (capability calls, webhook deliveries), and the
// connect-time re-check (`guardedLookup`) that defeats DNS rebinding.
import { Effect, Either } from "effect"
import type * as Dns from "node:dns"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest"
import { callProvider } from "../../layers/capabilities/ProviderCall.js"
import { checkUrl, guardedLookup, isBlockedAddress } from "../../layers/lib/SsrfGuard.js"
import { createEndUser, createPlatform, type Gateway, startGateway } from "../support/Gateway.js"

// The guard resolves through this module's `lookup`; a test swaps one answer in to play a
// rebinding DNS server (public at check time, loopback at connect time). Real DNS otherwise.
vi.mock("node:dns", async (importOriginal) => {
  const actual = await importOriginal<typeof Dns>()
  return { ...actual, lookup: vi.fn(actual.lookup) }
})
const dns = await import("node:dns")
const mockedLookup = vi.mocked(dns.lookup)
const realLookup = (await vi.importActual<typeof Dns>("node:dns")).lookup

afterEach(() => {
  mockedLookup.mockClear()
})

// ---- helpers ------------------------------------------------------------------------------------

interface Local {
  readonly port: number
  readonly url: string
  readonly hits: Array<string>
  readonly close: () => Promise<void>
}

/** A node:http server on 127.0.0.1 that records every request; `answer` decides the reply. */
const listen = async (answer: (res: http.ServerResponse) => void = (res) => res.writeHead(200).end("ok")): Promise<Local> => {
  const hits: Array<string> = []
  const server = http.createServer((req, res) => {
    hits.push(`${req.method} ${req.url}`)
    answer(res)
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    hits,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}

const refusedBy = async (url: string, allowPrivate = false) => Either.isLeft(await Effect.runPromise(Effect.either(checkUrl(url, allowPrivate))))

/** A GET with node:http the way the gateway sends (optional `lookup`, no redirect handling). */
const get = (url: string, lookup?: http.RequestOptions["lookup"]) =>
  new Promise<{ readonly status: number } | { readonly error: NodeJS.ErrnoException }>((resolve) => {
    // A fresh connection each time: a pooled keep-alive socket would skip `lookup` altogether.
    const options: http.RequestOptions = lookup === undefined ? { agent: false } : { agent: false, lookup }
    const req = http.request(url, options, (res) => {
      res.resume()
      resolve({ status: res.statusCode ?? 0 })
    })
    req.setTimeout(5_000, () => req.destroy(new Error("timeout")))
    req.on("error", (error: NodeJS.ErrnoException) => resolve({ error }))
    req.end()
  })

const lookupOnce = (host: string, options: Dns.LookupOptions) =>
  new Promise<{ readonly err: NodeJS.ErrnoException | null; readonly address: unknown; readonly family: unknown }>((resolve) =>
    guardedLookup(host, options, (err, address, family) => resolve({ err, address, family }))
  )

// ---- addresses ----------------------------------------------------------------------------------

describe("isBlockedAddress", () => {
  it("blocks loopback, private, CGNAT, link-local/metadata and reserved IPv4", () => {
    const blocked = [
      "127.0.0.1", "127.0.0.53", "127.255.255.255", // 127.0.0.0/8
      "10.0.0.0", "10.255.255.255", // 10/8
      "172.16.0.0", "172.20.1.1", "172.31.255.255", // 172.16/12
      "192.168.0.0", "192.168.255.255", // 192.168/16
      "100.64.0.0", "100.100.100.200", "100.127.255.255", // 100.64/10 CGNAT (Alibaba metadata is 100.100.100.200)
      "169.254.169.254", "169.254.0.1", // link-local, cloud metadata
      "0.0.0.0", "0.255.255.255", "192.0.0.170", "198.18.0.1", "198.19.255.255",
      "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255"
    ]
    for (const ip of blocked) expect(isBlockedAddress(ip), ip).toBe(true)
  })

  it("passes public IPv4, including the neighbours of every blocked range", () => {
    const allowed = [
      "8.8.8.8", "1.1.1.1", "93.184.215.14",
      "126.255.255.255", "128.0.0.0", // around 127/8
      "9.255.255.255", "11.0.0.0", // around 10/8
      "172.15.255.255", "172.32.0.0", // around 172.16/12
      "192.167.255.255", "192.169.0.0", // around 192.168/16
      "100.63.255.255", "100.128.0.0", // around 100.64/10
      "169.253.255.255", "169.255.0.0", // around 169.254/16
      "1.0.0.0", "223.255.255.255"
    ]
    for (const ip of allowed) expect(isBlockedAddress(ip), ip).toBe(false)
  })

  it("blocks IPv6 loopback, unique-local, link-local and every form that embeds a private IPv4", () => {
    const blocked = [
      "::1", "0:0:0:0:0:0:0:1", "::",
      "fc00::1", "fdff:ffff::1", // fc00::/7
      "fe80::1", "febf:ffff::1", "fe80::1%eth0", // fe80::/10
      "fec0::1", "ff02::1",
      "::ffff:127.0.0.1", "::ffff:7f00:1", "0:0:0:0:0:ffff:7f00:1", "::ffff:10.0.0.1", "::ffff:a9fe:a9fe", "::ffff:192.168.1.1", // mapped
      "::127.0.0.1", // IPv4-compatible (deprecated)
      "64:ff9b::127.0.0.1", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b::10.1.2.3", // NAT64 well-known prefix
      "2002:7f00:1::", "2002:7f00:1::1", "2002:a00:1::", "2002:a9fe:a9fe::1", "2002:c0a8:101::", // 6to4 of 127/10/169.254/192.168
      // Not globally reachable, and each can carry an IPv4 address through a translator:
      "64:ff9b:1::a9fe:a9fe", "64:ff9b:1:7f00:1::", // local-use NAT64 prefix 64:ff9b:1::/48 (RFC 8215)
      "::ffff:0:7f00:1", "::ffff:0:a9fe:a9fe" // IPv4-translated ::ffff:0:0:0/96 (SIIT, RFC 2765)
    ]
    for (const ip of blocked) expect(isBlockedAddress(ip), ip).toBe(true)
  })

  it("passes public IPv6, and mapped/NAT64/6to4 forms of public IPv4", () => {
    const allowed = ["2606:4700:4700::1111", "2001:4860:4860::8888", "2a00:1450::1", "::ffff:8.8.8.8", "64:ff9b::8.8.8.8", "64:ff9b::808:808", "2002:808:808::1", "fbff::1", "fe7f::1"]
    for (const ip of allowed) expect(isBlockedAddress(ip), ip).toBe(false)
  })

  it("treats anything that is not an IP literal as blocked", () => {
    for (const x of ["", "localhost", "127.1", "2130706433", "0x7f.1", "1.2.3", "1.2.3.4.5", "256.0.0.1", "::ffff:999.0.0.1", "1:2:3:4:5:6:7:8:9"]) {
      expect(isBlockedAddress(x), x).toBe(true)
    }
  })
})

// ---- URLs ---------------------------------------------------------------------------------------

describe("checkUrl", () => {
  it("refuses loopback however the URL spells it (WHATWG normalises odd IPv4 forms first)", async () => {
    const loopback = [
      "http://127.0.0.1/", "http://127.1/", "http://127.0.1/", "http://0x7f.1/", "http://0x7f000001/", "http://2130706433/",
      "http://0177.0.0.1/", "http://017700000001/", "http://127.000.000.001/", "http://0x7f.0x0.0x0.0x1/", "http://127.0.0.1./",
      "http://%31%32%37.0.0.1/", "http://①②⑦.0.0.1/", "HTTP://127.0.0.1:8080/x", "http://user:pw@127.0.0.1/",
      "http://[::1]/", "http://[0:0:0:0:0:0:0:1]/", "http://[::ffff:127.0.0.1]/", "http://[::ffff:7f00:1]/",
      "http://[64:ff9b::127.0.0.1]/", "http://[2002:7f00:1::]/", "http://0/", "http://[::]/",
      "http://localhost/", "http://LOCALHOST:9/", "http://ｌｏｃａｌｈｏｓｔ/"
    ]
    for (const url of loopback) expect(await refusedBy(url), url).toBe(true)
  })

  it("refuses private, CGNAT, metadata and IPv6 private ranges", async () => {
    const privates = [
      "http://10.0.0.1/", "http://10.255.255.255/", "http://172.16.0.1/", "http://172.31.255.254/", "http://192.168.1.1/",
      "http://100.64.0.1/", "http://100.127.255.254/", "http://169.254.169.254/latest/meta-data/", "http://0xa9.0xfe.0xa9.0xfe/",
      "http://2852039166/", "https://[fd00:ec2::254]/", "http://[fc00::1]/", "http://[fe80::1]/", "http://[::ffff:10.0.0.1]/",
      "http://[::ffff:169.254.169.254]/", "http://[64:ff9b::a9fe:a9fe]/", "http://[2002:a9fe:a9fe::]/", "http://[64:ff9b:1::a9fe:a9fe]/"
    ]
    for (const url of privates) expect(await refusedBy(url), url).toBe(true)
  })

  it("passes public literals without DNS, and keeps the userinfo trick on the real host", async () => {
    for (const url of ["http://8.8.8.8/", "https://93.184.215.14:8443/hooks?x=1", "http://[2606:4700:4700::1111]/", "http://[::ffff:8.8.8.8]/"]) {
      const checked = await Effect.runPromise(Effect.either(checkUrl(url, false)))
      expect(Either.isRight(checked), url).toBe(true)
    }
    // The host of `http://127.0.0.1:80@8.8.8.8/` is 8.8.8.8 (the rest is userinfo): the URL the
    // request is made with is the one checked, so passing it is right.
    const tricky = await Effect.runPromise(checkUrl("http://127.0.0.1:80@8.8.8.8/", false))
    expect(tricky.hostname).toBe("8.8.8.8")
    expect(mockedLookup).not.toHaveBeenCalled()
  })

  it("refuses non-http schemes and relative URLs", async () => {
    const bad = [
      "ftp://example.com/", "file:///etc/passwd", "gopher://127.0.0.1:70/", "ws://example.com/", "wss://example.com/",
      "javascript:alert(1)", "data:text/plain,x", "dict://127.0.0.1:11211/", "ldap://example.com/", "//example.com/", "/hooks", "example.com", ""
    ]
    for (const url of bad) expect(await refusedBy(url), url).toBe(true)
  })

  it("allowPrivate=true lets private hosts through but still refuses bad schemes", async () => {
    for (const url of ["http://127.0.0.1:1/", "http://localhost:1/", "http://10.0.0.1/", "http://[::1]/"]) {
      expect(await refusedBy(url, true), url).toBe(false)
    }
    for (const url of ["ftp://127.0.0.1/", "file:///etc/passwd", "gopher://localhost/", "javascript:alert(1)", "//127.0.0.1/"]) {
      expect(await refusedBy(url, true), url).toBe(true)
    }
  })

  it("names the refused host but never the address it resolves to (no DNS oracle)", async () => {
    mockedLookup.mockImplementationOnce(((_host: string, _options: unknown, cb: (...args: Array<unknown>) => void) =>
      cb(null, [{ address: "10.20.30.40", family: 4 }])) as never)
    const result = await Effect.runPromise(Effect.either(checkUrl("http://db.example.internal:5432/x", false)))
    expect(Either.isLeft(result) && result.left.message).toBe(
      "url host db.example.internal is not allowed: it resolves to a private or reserved address"
    )
    expect(mockedLookup).toHaveBeenCalledTimes(1)
    // A literal needs no resolution: the message says the address itself is refused.
    const literal = await Effect.runPromise(Effect.either(checkUrl("http://169.254.169.254/latest", false)))
    expect(Either.isLeft(literal) && literal.left.message).toBe("url host 169.254.169.254 is not allowed: it is a private or reserved address")
  })

  it("refuses a host that does not resolve, with the reason", async () => {
    const result = await Effect.runPromise(Effect.either(checkUrl("http://does-not-exist.invalid/", false)))
    expect(Either.isLeft(result) && result.left.message).toMatch(/does not resolve/)
  })
})

describe("the API's refusal", () => {
  let strict: Gateway
  beforeAll(async () => {
    strict = await startGateway({ env: { GATEWAY_ALLOW_PRIVATE_URLS: "false" } })
  })
  afterAll(async () => {
    await strict?.close()
  })

  it("a webhook URL whose host resolves privately: 422 that says 'not allowed' without the address", async () => {
    const { platformId, platformKey } = await createPlatform(strict)
    const res = await strict.call("POST", `/v1/platforms/${platformId}/webhook-endpoints`, {
      key: platformKey,
      body: { url: "http://localhost:9/hook" }
    })
    expect(res.status).toBe(422)
    expect(res.body.error).toMatchObject({
      code: "validation_error",
      param: "url",
      message: "url host localhost is not allowed: it resolves to a private or reserved address"
    })
    expect(JSON.stringify(res.body)).not.toMatch(/127\.0\.0\.1|::1/)
  })
})

// ---- connect time -------------------------------------------------------------------------------

describe("guardedLookup (connect-time re-check)", () => {
  let target: Local
  beforeAll(async () => {
    target = await listen()
  })
  afterAll(async () => {
    await target?.close()
  })

  it("refuses a hostname that resolves to loopback, with code ESSRF, in both lookup modes", async () => {
    for (const options of [{}, { all: true }, { family: 4 }] as const) {
      const { err } = await lookupOnce("localhost", options)
      expect(err?.code, JSON.stringify(options)).toBe("ESSRF")
      expect(err?.message).toBe("url host localhost is not allowed: it resolves to a private or reserved address")
    }
  })

  it("answers public addresses in the shape Node asked for", async () => {
    const single = await lookupOnce("8.8.8.8", {})
    expect(single).toEqual({ err: null, address: "8.8.8.8", family: 4 })
    const all = await lookupOnce("2606:4700:4700::1111", { all: true })
    expect(all).toEqual({ err: null, address: [{ address: "2606:4700:4700::1111", family: 6 }], family: undefined })
  })

  it("refuses when any one of several answers is private", async () => {
    mockedLookup.mockImplementationOnce(((_host: string, _options: unknown, cb: (...args: Array<unknown>) => void) =>
      cb(null, [{ address: "8.8.8.8", family: 4 }, { address: "10.0.0.5", family: 4 }])) as never)
    const { err } = await lookupOnce("mixed.test", {})
    expect(err?.code).toBe("ESSRF")
    // The error reaches tenants (webhook last_error, capability results): no resolved address in it.
    expect(err?.message).toBe("url host mixed.test is not allowed: it resolves to a private or reserved address")
    expect(err?.message).not.toContain("10.0.0.5")
  })

  it("http.request with lookup: guardedLookup to http://localhost:<port>/ fails with ESSRF and never reaches the server", async () => {
    // Control: the same request without the guard reaches the server, so a miss below is the guard's doing.
    expect(await get(`http://localhost:${target.port}/control`)).toEqual({ status: 200 })
    expect(target.hits).toEqual(["GET /control"])
    const guarded = await get(`http://localhost:${target.port}/guarded`, guardedLookup)
    expect("error" in guarded && guarded.error.code).toBe("ESSRF")
    expect(target.hits).toEqual(["GET /control"])
  })

  it("DNS rebinding: a host that resolves public at check time and loopback at connect time is refused when connecting", async () => {
    // A rebinding DNS server: the first answer is public (what checkUrl sees), every later one is 127.0.0.1.
    let answers = 0
    const rebinding = ((_host: string, options: unknown, cb: (...args: Array<unknown>) => void) => {
      const address = answers++ === 0 ? "93.184.215.14" : "127.0.0.1"
      const all = typeof options === "object" && options !== null && (options as { all?: boolean }).all === true
      return all ? cb(null, [{ address, family: 4 }]) : cb(null, address, 4)
    }) as never
    mockedLookup.mockImplementation(rebinding)
    try {
      const url = `http://rebind.test:${target.port}/rebound`
      const checked = await Effect.runPromise(Effect.either(checkUrl(url, false)))
      expect(Either.isRight(checked)).toBe(true) // the check alone is fooled
      const before = target.hits.length
      const guarded = await get(url, guardedLookup)
      expect("error" in guarded && guarded.error.code).toBe("ESSRF")
      expect(target.hits.length).toBe(before)

      // Control: a client that trusts the rebinding answer at connect time does reach the server.
      answers = 1
      expect(await get(url, rebinding)).toEqual({ status: 200 })
      expect(target.hits.slice(before)).toEqual(["GET /rebound"])
    } finally {
      mockedLookup.mockImplementation(realLookup)
    }
  })
})

// ---- redirects ----------------------------------------------------------------------------------

describe("redirects to private addresses", () => {
  let inner: Local
  let redirector: Local
  beforeAll(async () => {
    inner = await listen()
    redirector = await listen((res) => res.writeHead(302, { location: `${inner.url}/internal` }).end())
  })
  afterAll(async () => {
    await redirector?.close()
    await inner?.close()
  })

  it("control: a redirect-following client does reach the internal server", async () => {
    // Proves the pair of servers detects a followed redirect, so the assertions below can fail.
    const res = await fetch(`${redirector.url}/control`)
    expect(res.status).toBe(200)
    expect(inner.hits).toEqual(["GET /internal"])
    inner.hits.length = 0
  })

  it("a capability call answered 302 -> 127.0.0.1 ends at the 302: the target is never contacted", async () => {
    // The redirector itself is on loopback, so private URLs must be allowed to reach it at all:
    // what stops the hop is that node:http follows no redirects, with or without the guard.
    const before = redirector.hits.length
    const [outcome] = await Effect.runPromise(
      callProvider({ url: `${redirector.url}/run`, method: "POST", input: { q: 1 }, runId: "run-1", timeoutMs: 5_000, allowPrivate: true })
    )
    expect(outcome).toMatchObject({ _tag: "Answered", status: 302 })
    expect(redirector.hits.slice(before)).toEqual(["POST /run"])
    expect(inner.hits).toEqual([])
  })

  it("with the guard on, the same call to a loopback host is refused before connecting", async () => {
    const before = redirector.hits.length
    for (const url of [`${redirector.url}/run`, `http://localhost:${redirector.port}/run`]) {
      const [outcome] = await Effect.runPromise(
        callProvider({ url, method: "GET", input: null, runId: "run-2", timeoutMs: 5_000, allowPrivate: false })
      )
      expect(outcome, url).toMatchObject({ _tag: "NoAnswer", kind: "url_refused" })
    }
    expect(redirector.hits.length).toBe(before)
    expect(inner.hits).toEqual([])
  })

  describe("webhook delivery", () => {
    let gw: Gateway
    beforeAll(async () => {
      gw = await startGateway({ env: { GATEWAY_ALLOW_PRIVATE_URLS: "true", GATEWAY_WEBHOOK_RETRY_SCHEDULE: "0s" } })
    })
    afterAll(async () => {
      await gw?.close()
    })

    it("a receiver answering 302 -> 127.0.0.1 gets a failed attempt (HTTP 302); the target is never contacted", async () => {
      const { platformId, platformKey } = await createPlatform(gw)
      const eu = await createEndUser(gw, platformId, platformKey, "redirected")
      const hook = await gw.call("POST", `/v1/platforms/${platformId}/webhook-endpoints`, { key: platformKey, body: { url: `${redirector.url}/hook` } })
      expect(hook.status).toBe(201)
      await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget`, { key: platformKey, body: { max_usd: 1 } })
      expect((await gw.call("POST", `/v1/platforms/${platformId}/end-users/${eu.endUserId}/budget/topup`, { key: platformKey, body: { amount_usd: 1 } })).status).toBe(200)
      const deadline = Date.now() + 10_000
      let first: any
      while (Date.now() < deadline) {
        const list = await gw.call("GET", `/v1/platforms/${platformId}/webhook-endpoints/${hook.body.id}/deliveries`, { key: platformKey })
        first = list.body.data.find((d: any) => d.status !== "pending")
        if (first !== undefined) break
        await new Promise((r) => setTimeout(r, 50))
      }
      expect(first).toMatchObject({ status: "failed", http_status: 302 })
      expect(redirector.hits.some((h) => h === "POST /hook")).toBe(true)
      expect(inner.hits).toEqual([])
    })
  })
})
