// Waiting for what the gateway writes just after it answers (queued settlements) or at start.

/** Polls `read` every 100 ms until `done` holds or `timeoutMs` passes, then returns the last value. */
export const until = async <T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 20_000): Promise<T> => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await read()
    if (done(value) || Date.now() > deadline) return value
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

/** Checks `holds` every 10 ms; throws, naming `what`, when it still fails after `timeoutMs`. */
export const waitUntil = async (holds: () => boolean, timeoutMs: number, what: string): Promise<void> => {
  const deadline = Date.now() + timeoutMs
  while (!holds()) {
    if (Date.now() > deadline) throw new Error(`${what}: condition not met within ${timeoutMs} ms`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}
