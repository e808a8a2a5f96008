// How much of an upstream's answer the gateway may hold in memory (a JSON answer, one SSE line or
// event, a non-2xx body kept for the log): every buffer that grows with a provider's output has a
// ceiling, and crossing it fails the attempt rather than growing.
import { Config } from "effect"
import { bytesConfig } from "../../lib/ConfigValues.js"

export interface UpstreamLimits {
  /** The most a non-streaming (JSON) answer may be; past it the exchange is aborted. */
  readonly maxBodyBytes: number
  /**
   * The longest SSE line (field name included) and the longest data of one event, in characters
   * (at most the line's UTF-8 bytes); past it the stream fails and the parser keeps none of it.
   */
  readonly maxSseLineLength: number
}

export const defaultUpstreamLimits: UpstreamLimits = {
  maxBodyBytes: 32 * 1024 * 1024,
  maxSseLineLength: 1024 * 1024
}

/** Of a non-2xx answer only this much is read (for the log); the exchange is then aborted. */
export const ERROR_BODY_PREFIX_BYTES = 64 * 1024

/** GATEWAY_UPSTREAM_MAX_BODY and GATEWAY_UPSTREAM_MAX_SSE_LINE (sizes such as 32mb, 1mb or plain bytes). */
export const upstreamLimitsConfig: Config.Config<UpstreamLimits> = Config.all({
  maxBodyBytes: bytesConfig("GATEWAY_UPSTREAM_MAX_BODY", defaultUpstreamLimits.maxBodyBytes, 1024),
  maxSseLineLength: bytesConfig("GATEWAY_UPSTREAM_MAX_SSE_LINE", defaultUpstreamLimits.maxSseLineLength, 1024)
})
