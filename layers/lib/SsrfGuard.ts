// SSRF guard for every outbound URL a tenant supplies (webhooks now; provider and app URLs later):
// http/https only, and the host must resolve to public addresses unless GATEWAY_ALLOW_PRIVATE_URLS.
// `guardedLookup` re-checks at connect time, so DNS rebinding between check and connect fails too.
import { Config, Data, Effect } from "effect"
import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from "node:dns"
import { isIP } from "node:net"
import { embeddedDatabase, withDefaultFrom } from "./ConfigValues.js"

/** Why a URL was refused; `message` is safe to show to the tenant. */
export class UrlRefused extends Data.TaggedError("UrlRefused")<{ readonly message: string }> {}

/**
 * GATEWAY_ALLOW_PRIVATE_URLS: on by default only with the embedded database (the laptop demo,
 * listening on loopback, whose webhook receivers and tool apps are local); an explicit value wins.
 */
export const allowPrivateUrls = withDefaultFrom(Config.boolean("GATEWAY_ALLOW_PRIVATE_URLS"), embeddedDatabase)

// --- address classification ------------------------------------------------------------

const v4Octets = (ip: string): ReadonlyArray<number> | undefined => {
  const parts = ip.split(".")
  if (parts.length !== 4) return undefined
  const octets = parts.map((p) => (/^\d{1,3}$/.test(p) ? Number(p) : NaN))
  return octets.every((o) => o >= 0 && o <= 255) ? octets : undefined
}

const inV4 = (o: ReadonlyArray<number>, base: readonly [number, number, number, number], bits: number): boolean => {
  const value = ((o[0]! << 24) | (o[1]! << 16) | (o[2]! << 8) | o[3]!) >>> 0
  const net = ((base[0] << 24) | (base[1] << 16) | (base[2] << 8) | base[3]) >>> 0
  const mask = bits === 0 ? 0 : (~0 << (32 - bits)) >>> 0
  return (value & mask) === (net & mask)
}

/** Everything that is not a routable public unicast IPv4 address. */
const V4_BLOCKED: ReadonlyArray<readonly [readonly [number, number, number, number], number]> = [
  [[0, 0, 0, 0], 8], // "this network"
  [[10, 0, 0, 0], 8], // private
  [[100, 64, 0, 0], 10], // CGNAT
  [[127, 0, 0, 0], 8], // loopback
  [[169, 254, 0, 0], 16], // link-local, cloud metadata 169.254.169.254
  [[172, 16, 0, 0], 12], // private
  [[192, 0, 0, 0], 24], // IETF protocol assignments
  [[192, 168, 0, 0], 16], // private
  [[198, 18, 0, 0], 15], // benchmarking
  [[224, 0, 0, 0], 4], // multicast
  [[240, 0, 0, 0], 4] // reserved, broadcast
]

const blockedV4 = (o: ReadonlyArray<number>): boolean => V4_BLOCKED.some(([base, bits]) => inV4(o, base, bits))

/** 16 bytes of an IPv6 address (zone id dropped, embedded dotted IPv4 allowed), or undefined. */
const v6Bytes = (input: string): ReadonlyArray<number> | undefined => {
  let ip = input.split("%")[0]!
  const tail: Array<number> = []
  const lastColon = ip.lastIndexOf(":")
  if (ip.includes(".", lastColon)) {
    const v4 = v4Octets(ip.slice(lastColon + 1))
    if (v4 === undefined) return undefined
    tail.push(...v4)
    ip = ip.slice(0, lastColon + 1) + "0:0"
  }
  const halves = ip.split("::")
  if (halves.length > 2) return undefined
  const groups = (s: string) => (s === "" ? [] : s.split(":"))
  const head = groups(halves[0]!)
  const rest = halves.length === 2 ? groups(halves[1]!) : []
  const missing = 8 - head.length - rest.length
  if (halves.length === 1 ? missing !== 0 : missing < 1) return undefined
  const all = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill("0"), ...rest]
  const bytes: Array<number> = []
  for (const g of all) {
    if (!/^[0-9a-f]{1,4}$/i.test(g)) return undefined
    const n = parseInt(g, 16)
    bytes.push(n >> 8, n & 0xff)
  }
  if (tail.length === 4) bytes.splice(12, 4, ...tail)
  return bytes
}

const blockedV6 = (b: ReadonlyArray<number>): boolean => {
  const zeros = (from: number, to: number) => b.slice(from, to).every((x) => x === 0)
  if (zeros(0, 15) && (b[15] === 0 || b[15] === 1)) return true // :: and ::1
  // Forms that carry an IPv4 address: judge the embedded address.
  if (zeros(0, 10) && b[10] === 0xff && b[11] === 0xff) return blockedV4(b.slice(12)) // ::ffff:a.b.c.d
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zeros(4, 12)) return blockedV4(b.slice(12)) // NAT64
  // The rest of 0000::/8 is reserved, never public, and some of it reaches IPv4 through a
  // translator: IPv4-compatible ::a.b.c.d, SIIT ::ffff:0:a.b.c.d, local-use NAT64 64:ff9b:1::/48.
  if (b[0] === 0x00) return true
  if (b[0] === 0x20 && b[1] === 0x02) return blockedV4(b.slice(2, 6)) // 6to4
  const first = b[0]!
  const second = b[1]!
  if ((first & 0xfe) === 0xfc) return true // fc00::/7 unique local
  if (first === 0xfe && (second & 0xc0) === 0x80) return true // fe80::/10 link-local
  if (first === 0xfe && (second & 0xc0) === 0xc0) return true // fec0::/10 old site-local
  if (first === 0xff) return true // multicast
  return false
}

/** True when `ip` (v4 or v6 literal) is not a public unicast address; unparsable counts as blocked. */
export const isBlockedAddress = (ip: string): boolean => {
  const family = isIP(ip.split("%")[0]!)
  if (family === 4) {
    const o = v4Octets(ip)
    return o === undefined || blockedV4(o)
  }
  if (family === 6) {
    const b = v6Bytes(ip)
    return b === undefined || blockedV6(b)
  }
  return true
}

// --- URLs and connections ----------------------------------------------------------------

const refused = (message: string) => new UrlRefused({ message })

/** The refusal the tenant sees: never the address the host resolved to (see checkUrl). */
const notAllowed = (host: string) =>
  `url host ${host} is not allowed: ${isIP(host) !== 0 ? "it is" : "it resolves to"} a private or reserved address`

const lookupAll = (host: string) =>
  Effect.async<ReadonlyArray<LookupAddress>, UrlRefused>((resume) => {
    dnsLookup(host, { all: true, verbatim: true }, (err, addresses) => {
      if (err) resume(Effect.fail(refused(`url host ${host} does not resolve (${err.code ?? err.message})`)))
      else resume(Effect.succeed(addresses))
    })
  })

/** The URL's scheme and syntax alone (no DNS); used by request validation too. */
export const parseHttpUrl = (raw: string): URL | undefined => {
  try {
    const url = new URL(raw)
    return url.protocol === "http:" || url.protocol === "https:" ? url : undefined
  } catch {
    return undefined
  }
}

/**
 * Checks a tenant-supplied URL: http/https, and (unless `allowPrivate`) every address its host
 * resolves to must be public. Hosts that resolve to several addresses are refused if any is private.
 */
export const checkUrl = (raw: string, allowPrivate: boolean): Effect.Effect<URL, UrlRefused> =>
  Effect.gen(function*() {
    const url = parseHttpUrl(raw)
    if (url === undefined) return yield* refused("url must be an absolute http or https URL")
    if (allowPrivate) return url
    // WHATWG parsing already normalised odd IPv4 spellings (0x7f.1, 2130706433) to dotted form.
    const host = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname
    const literal = isIP(host) !== 0
    const addresses = literal ? [host] : (yield* lookupAll(host)).map((a) => a.address)
    if (addresses.length === 0) return yield* refused(`url host ${host} does not resolve`)
    const bad = addresses.find(isBlockedAddress)
    if (bad !== undefined) {
      // The resolved address goes to the server log only: told to the tenant, it would map the
      // deployment's internal DNS for them (which internal names exist and where they point).
      if (!literal) {
        yield* Effect.logWarning("SSRF guard: url refused").pipe(Effect.annotateLogs({ "url.host": host, "resolved.address": bad }))
      }
      return yield* refused(notAllowed(host))
    }
    return url
  })

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | Array<LookupAddress>, family?: number) => void

/**
 * A drop-in `lookup` for node:http/https that refuses private addresses when the socket
 * connects; closes the window between `checkUrl` and the connection (DNS rebinding).
 */
export const guardedLookup = (hostname: string, options: LookupOptions, callback: LookupCallback): void => {
  dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
    if (err) return callback(err, [])
    const bad = addresses.find((a) => isBlockedAddress(a.address))
    if (bad !== undefined) {
      // This message reaches tenants (a webhook delivery's last_error, a capability run's result).
      const error: NodeJS.ErrnoException = new Error(notAllowed(hostname))
      error.code = "ESSRF"
      return callback(error, [])
    }
    if (options.all === true) return callback(null, addresses)
    const first = addresses[0]
    if (first === undefined) return callback(new Error(`${hostname} does not resolve`), [])
    callback(null, first.address, first.family)
  })
}
