// The server-side record of a failed upstream attempt: the provider's own text (UpstreamError.detail)
// with credentials redacted, logged as a warning outside any span; clients and traces only get the
// gateway's generic wording, since an upstream may echo the provider key it was sent.
import { Context, Effect, FiberRef, Tracer } from "effect"
import type { UpstreamError } from "./Upstream.js"

const REDACTED = "[redacted]"

/** The longest stretch of provider text a log line keeps (after redaction). */
const MAX_LOGGED_DETAIL = 2_000

/** Secrets shorter than this are not searched for verbatim (they would blank out ordinary words). */
const MIN_SECRET_LENGTH = 8

// Credential shapes whoever wrote them: auth schemes, provider and gateway keys (sk-..., sk-ant-...,
// sk-plat_...), and values given to credential-named fields or headers (JSON, form or header syntax).
const CREDENTIAL_PATTERNS: ReadonlyArray<readonly [RegExp, string]> = [
  [/\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]+/gi, `$1 ${REDACTED}`],
  [/\b(?:sk|pk|rk)-[A-Za-z0-9_-]{6,}/g, REDACTED],
  [
    /((?:x-api-key|api[-_]?key|authorization|access[-_]?token|refresh[-_]?token|client[-_]?secret|secret|password)["']?\s*[:=]\s*["']?)(?!\[redacted\]|(?:Bearer|Basic|Token)\s)[^\s"',;&}]+/gi,
    `$1${REDACTED}`
  ]
]

/** A text that ends with the first characters of `secret` (a body cut mid-key): that tail. */
const partialTail = (text: string, secret: string): number => {
  for (let n = Math.min(secret.length - 1, text.length); n >= 4; n--) {
    if (text.endsWith(secret.slice(0, n))) return n
  }
  return 0
}

/**
 * `text` without the given secrets (wherever they occur, and a cut-off start of one at its end)
 * and without anything shaped like a credential.
 */
export const redactSecrets = (text: string, secrets: ReadonlyArray<string>): string => {
  let out = text
  for (const secret of secrets) {
    if (secret.length < MIN_SECRET_LENGTH) continue
    out = out.split(secret).join(REDACTED)
    const tail = partialTail(out, secret)
    if (tail > 0) out = out.slice(0, out.length - tail) + REDACTED
  }
  for (const [pattern, replacement] of CREDENTIAL_PATTERNS) out = out.replace(pattern, replacement)
  return out
}

/** The redacted detail as it is logged: redaction first, so a cut never leaves half a secret. */
export const loggedDetail = (detail: string, secrets: ReadonlyArray<string>): string => {
  const redacted = redactSecrets(detail, secrets)
  return redacted.length > MAX_LOGGED_DETAIL ? `${redacted.slice(0, MAX_LOGGED_DETAIL)}...` : redacted
}

export interface FailedAttempt {
  /** The provider's slug (when the caller knows it) and the provider's model id. */
  readonly provider?: string | undefined
  readonly model: string
  /** The provider key that call used: redacted from the detail wherever it appears. */
  readonly apiKey: string
}

/**
 * One warning per failed attempt, annotated with what failed and the provider's redacted text.
 * It is written with no current span: the tracer's logger would otherwise copy the annotations
 * into a span event, and the provider's text stays out of traces.
 */
export const logUpstreamFailure = (error: UpstreamError, attempt: FailedAttempt, message = "upstream attempt failed") =>
  Effect.logWarning(message).pipe(
    Effect.annotateLogs({
      "upstream.provider": attempt.provider ?? "",
      "upstream.model": attempt.model,
      "upstream.kind": error.kind,
      "upstream.status": error.status ?? "",
      "upstream.retryable": error.retryable,
      "upstream.error": error.message,
      "upstream.detail": error.detail === undefined ? "" : loggedDetail(error.detail, [attempt.apiKey])
    }),
    Effect.locallyWith(FiberRef.currentContext, Context.omit(Tracer.ParentSpan))
  )
