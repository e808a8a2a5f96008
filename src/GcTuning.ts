// Two V8 garbage-collector settings, made before the rest of the program is loaded (main.ts
// first imports GcTuningAtStart.ts, which applies them): V8 reads both at every collection, but a heap limit computed, or
// code compiled, before them would keep the old behaviour for a while. Plain process bootstrap
// (no Effect Config): it has to run before everything else. A value given to node itself
// (command line or NODE_OPTIONS) wins over ours (hot-path rule "bounded memory",
// docs/performance.md).
//
// - Heap growing factor. Left to itself, a busy process gets a factor of up to 4: at 256 streams
//   the live heap is under 100 MB, yet the process peaked above 400 MB RSS, most of it garbage
//   waiting for a full collection. A fixed factor of 1.6 (GATEWAY_HEAP_GROWING_PERCENT=60) holds
//   the peak well under the memory target; 1.3 held it lower, but its full collections came so
//   often that their marking took a visible share of every call's CPU.
// - No allocation-site pretenuring. V8 allocates objects of "long-lived" allocation sites
//   straight into the old generation; the Effect runtime's per-call objects get that verdict,
//   and then, dead in the old generation, they keep the call's young objects alive through the
//   scavenges until the next full collection. Without it, half as much survives a scavenge.
import { setFlagsFromString } from "node:v8"

const mentions = (nodeArgs: ReadonlyArray<string>, flag: string) =>
  nodeArgs.some((arg) => {
    const name = arg.replace(/_/g, "-")
    return name.startsWith(`--${flag}`) || name.startsWith(`--no-${flag}`)
  })

/**
 * The V8 flag for GATEWAY_HEAP_GROWING_PERCENT (`raw`, default 60), or undefined: 0 keeps V8's
 * adaptive factor. Throws on a value that is not 0 or a positive integer.
 */
export const heapGrowthFlag = (raw: string | undefined, nodeArgs: ReadonlyArray<string>): string | undefined => {
  const text = raw === undefined || raw.trim() === "" ? "60" : raw.trim()
  if (!/^\d+$/.test(text)) {
    throw new Error(`GATEWAY_HEAP_GROWING_PERCENT must be 0 (V8's own adaptive factor) or a positive integer, got "${raw}"`)
  }
  return Number(text) > 0 && !mentions(nodeArgs, "heap-growing-percent") ? `--heap-growing-percent=${Number(text)}` : undefined
}

/** `--no-allocation-site-pretenuring`, unless node was told either way. */
export const pretenuringFlag = (nodeArgs: ReadonlyArray<string>): string | undefined =>
  mentions(nodeArgs, "allocation-site-pretenuring") ? undefined : "--no-allocation-site-pretenuring"

/** Sets both flags on this process's V8; a bad GATEWAY_HEAP_GROWING_PERCENT ends the process. */
export const applyGcTuning = () => {
  try {
    const nodeArgs = [...process.execArgv, ...(process.env.NODE_OPTIONS ?? "").split(/\s+/)]
    for (const flag of [heapGrowthFlag(process.env.GATEWAY_HEAP_GROWING_PERCENT, nodeArgs), pretenuringFlag(nodeArgs)]) {
      if (flag !== undefined) setFlagsFromString(flag)
    }
  } catch (error) {
    // The message alone: an uncaught error would also print its (minified, one-line) source line.
    console.error(error instanceof Error ? error.message : String(error))
    process.exit(1)
  }
}
