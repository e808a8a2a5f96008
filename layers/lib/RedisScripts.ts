// Lua scripts run on Redis by their SHA (EVALSHA), sent again in full (EVAL) when the server does
// not know them (a restart, SCRIPT FLUSH, a fail-over to a replica that never saw them). One
// script is one command: atomic on the server, and one write and one reply on the client.
import { createHash } from "node:crypto"
import type { Redis } from "ioredis"

export interface RedisScript {
  readonly lua: string
  readonly sha: string
}

export const redisScript = (lua: string): RedisScript => ({ lua, sha: createHash("sha1").update(lua).digest("hex") })

const isNoScript = (e: unknown) => e instanceof Error && e.message.startsWith("NOSCRIPT")

export const runRedisScript = (
  redis: Redis,
  script: RedisScript,
  keys: ReadonlyArray<string>,
  args: ReadonlyArray<string | number>
): Promise<unknown> =>
  redis
    .evalsha(script.sha, keys.length, ...keys, ...args)
    .catch((e: unknown) => (isNoScript(e) ? redis.eval(script.lua, keys.length, ...keys, ...args) : Promise.reject(e)))
