// How far V8 lets the heap grow past its live size before the next full collection. Left to
// itself, a busy process gets a growing factor of up to 4: at 256 streams the live heap is under
// 100 MB, yet the process peaked above 400 MB RSS, most of it garbage waiting for a full
// collection. A fixed factor of 1.3 (GATEWAY_HEAP_GROWING_PERCENT=30) holds the peak near 230 MB
// for more frequent, but small, full collections (about 50 MB are live; docs/performance.md).
//
// main.ts imports this module first, so the flag is set while the heap is still small: V8 reads
// it at every heap-limit computation, but a limit computed before it would hold until the next
// full collection. Plain process bootstrap (no Effect Config): it has to run before the rest of
// the program is even loaded.
import { setFlagsFromString } from "node:v8"

/**
 * The V8 flag for GATEWAY_HEAP_GROWING_PERCENT (`raw`, default 30), or undefined: 0 keeps V8's
 * adaptive factor, and a factor the operator gave node itself (command line or NODE_OPTIONS)
 * wins over ours. Throws on a value that is not 0 or a positive integer.
 */
export const heapGrowthFlag = (raw: string | undefined, nodeArgs: ReadonlyArray<string>): string | undefined => {
  const text = raw === undefined || raw.trim() === "" ? "30" : raw.trim()
  if (!/^\d+$/.test(text)) {
    throw new Error(`GATEWAY_HEAP_GROWING_PERCENT must be 0 (V8's own adaptive factor) or a positive integer, got "${raw}"`)
  }
  const operatorSet = nodeArgs.some((arg) => arg.replace(/_/g, "-").startsWith("--heap-growing-percent"))
  return Number(text) > 0 && !operatorSet ? `--heap-growing-percent=${Number(text)}` : undefined
}

try {
  const flag = heapGrowthFlag(process.env.GATEWAY_HEAP_GROWING_PERCENT, [
    ...process.execArgv,
    ...(process.env.NODE_OPTIONS ?? "").split(/\s+/)
  ])
  if (flag !== undefined) setFlagsFromString(flag)
} catch (error) {
  // The message alone: an uncaught error would also print its (minified, one-line) source line.
  console.error(error instanceof Error ? error.message : String(error))
  process.exit(1)
}
