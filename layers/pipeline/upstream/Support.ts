// What each upstream kind takes of a request's content parts. Checked with the model (check 1),
// before anything is counted or reserved: a part some candidate upstream cannot take is a 422
// naming it, never dropped on the way nor a failed, billed call. Images go to every kind; files
// depend on the kind. Output formats (json_object, json_schema) every kind serves: the adapters
// translate them (docs/decisions.md, "Responses API").
import type { ChatRequest, ContentPart } from "../../../schemas/Chat.js"
import type { ProviderKind } from "./Upstream.js"

export interface RefusedPart {
  /** `messages.N.content.M` plus the refused field (`.file`, `.file.file_url`). */
  readonly param: string
  /** What was refused, in the client's words. */
  readonly what: string
}

/** The part's field the kind cannot take (relative to the part) and what it is, or undefined. */
const refusal: Readonly<Record<ProviderKind, (part: ContentPart) => { field: string; what: string } | undefined>> = {
  // Chat Completions takes files by content or id, not by URL.
  openai: (part) => part.file?.file_url !== undefined ? { field: "file.file_url", what: "files by URL (file_url)" } : undefined,
  "openai-responses": () => undefined,
  // The Messages API gets images; files (documents) are not translated.
  anthropic: (part) => part.file !== undefined ? { field: "file", what: "file inputs (input_file)" } : undefined,
  mock: () => undefined
}

/**
 * The first content part one of the candidates' kinds cannot take; undefined when all take every
 * part. `native`: a Messages API call, which `anthropic` upstreams get as the client sent it.
 */
export const refusedPart = (
  request: ChatRequest,
  candidates: ReadonlyArray<{ readonly kind: ProviderKind }>,
  native = false
): RefusedPart | undefined => {
  for (const [i, message] of request.messages.entries()) {
    const content = message.content
    if (content === undefined || content === null || typeof content === "string") continue
    for (const [j, part] of content.entries()) {
      for (const candidate of candidates) {
        if (native && candidate.kind === "anthropic") continue
        const refused = refusal[candidate.kind](part)
        if (refused !== undefined) return { param: `messages.${i}.content.${j}.${refused.field}`, what: refused.what }
      }
    }
  }
  return undefined
}
