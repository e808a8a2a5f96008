// Adds lock entries for optional platform packages that this registry does not serve (other OS/CPU),
// exactly as npm writes them on a full registry, so `npm ci` validates; they are never installed here.
import { readFileSync, writeFileSync } from "node:fs"
const file = process.argv[2]
const lock = JSON.parse(readFileSync(file, "utf8"))
const OS = ["darwin", "linux", "win32", "android", "freebsd", "openbsd", "openharmony", "sunos", "aix", "netbsd"]
const CPU = { "arm64": "arm64", "x64": "x64", "arm": "arm", "ia32": "ia32", "loong64": "loong64", "ppc64": "ppc64", "riscv64": "riscv64", "s390x": "s390x" }
let added = 0
for (const [path, pkg] of Object.entries(lock.packages)) {
  for (const [name, spec] of Object.entries(pkg.optionalDependencies ?? {})) {
    const key = `node_modules/${name}`
    if (lock.packages[key] || lock.packages[`${path}/node_modules/${name}`]) continue
    const tokens = name.split("/").pop().split("-")
    const os = tokens.find((t) => OS.includes(t))
    const cpu = tokens.map((t) => CPU[t]).find((c) => c !== undefined)
    if (os === undefined || cpu === undefined) throw new Error(`cannot infer platform of ${name}`)
    const entry = { version: spec.replace(/^[\^~]/, ""), cpu: [cpu], optional: true, os: [os] }
    if (pkg.dev) entry.dev = true
    if (tokens.some((t) => t.startsWith("musl"))) entry.libc = ["musl"]
    if (tokens.some((t) => t === "gnu" || t === "gnueabihf")) entry.libc = ["glibc"]
    lock.packages[key] = entry
    added++
  }
}
lock.packages = Object.fromEntries(Object.entries(lock.packages).sort(([a], [b]) => a === "" ? -1 : b === "" ? 1 : a.localeCompare(b)))
writeFileSync(file, JSON.stringify(lock, null, 2) + "\n")
console.log(`added ${added} entries`)
