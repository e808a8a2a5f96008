// The V8 garbage-collector flags start-up sets, GATEWAY_HEAP_GROWING_PERCENT's validation, and
// the node flags `npm start` gives the bundle (package.json config.node_flags).
// What they do to memory and speed is the bench's to measure (docs/performance.md).
import { spawnSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { expect, it } from "vitest"
import { heapGrowthFlag, pretenuringFlag } from "../../src/GcTuning.js"

it("sets a fixed growing factor, 60% unless configured", () => {
  expect(heapGrowthFlag(undefined, [])).toBe("--heap-growing-percent=60")
  expect(heapGrowthFlag("", [])).toBe("--heap-growing-percent=60")
  expect(heapGrowthFlag("80", ["--enable-source-maps"])).toBe("--heap-growing-percent=80")
})

it("0 keeps V8's adaptive factor; a factor given to node itself wins", () => {
  expect(heapGrowthFlag("0", [])).toBeUndefined()
  expect(heapGrowthFlag("50", ["--heap-growing-percent=20"])).toBeUndefined()
  expect(heapGrowthFlag(undefined, ["--heap_growing_percent=20"])).toBeUndefined()
  expect(heapGrowthFlag("30", ["--enable-source-maps"])).toBe("--heap-growing-percent=30")
})

it("turns allocation-site pretenuring off unless node was told either way", () => {
  expect(pretenuringFlag([])).toBe("--no-allocation-site-pretenuring")
  expect(pretenuringFlag(["--allocation-site-pretenuring"])).toBeUndefined()
  expect(pretenuringFlag(["--no-allocation_site_pretenuring"])).toBeUndefined()
})

it("refuses anything but 0 or a positive integer", () => {
  for (const bad of ["-5", "1.5", "lots"]) expect(() => heapGrowthFlag(bad, [])).toThrow(/must be 0/)
})

it("the bundle refuses a bad value at start, before anything else runs", () => {
  const run = spawnSync(process.execPath, ["dist/main.js"], {
    env: { ...process.env, GATEWAY_HEAP_GROWING_PERCENT: "-1" },
    encoding: "utf8",
    timeout: 20_000
  })
  expect(run.status).not.toBe(0)
  expect(run.stderr).toContain("GATEWAY_HEAP_GROWING_PERCENT must be 0")
})

it("npm start runs the bundle with package.json's node flags: a 32 MB semi-space young generation", () => {
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"))
  expect(pkg.scripts.start).toMatch(/exec node \$npm_package_config_node_flags dist\/main\.js$/)
  expect(pkg.config.node_flags).toBe("--max-semi-space-size=32")
  // The flag takes effect at start only: the young generation grows to 2 x 32 MB under allocation.
  const probe = `const keep = []; for (let r = 0; r < 100; r++) { keep.push(Array.from({ length: 20000 }, (_, i) => ({ i }))); if (keep.length > 20) keep.shift() }
    console.log(require("node:v8").getHeapSpaceStatistics().find((s) => s.space_name === "new_space").space_size)`
  const newSpace = (flags: ReadonlyArray<string>) =>
    Number(spawnSync(process.execPath, [...flags, "-e", probe], { encoding: "utf8", timeout: 20_000 }).stdout.trim())
  expect(newSpace(pkg.config.node_flags.split(" "))).toBeGreaterThan(60e6)
  expect(newSpace([])).toBeLessThan(40e6)
})
