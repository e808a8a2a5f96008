// The Gmail tool app: send a plain-text email (an RFC 2822 message, base64url `raw`) and search
// the mailbox (list ids, then each message's metadata), over the Gmail API v1.
import { Effect } from "effect"
import { asArray, callApi, defineTool, get, ToolFailure } from "./Http.js"
import type { ToolApp, ToolContext } from "./ToolApp.js"

const messagesPath = "/gmail/v1/users/me/messages"

/** Search answers are capped: every hit costs one more API call. */
const maxSearchResults = 25

// ---- send_email: building the RFC 2822 message ----------------------------------------------

// A CR or LF in a header value would let the caller inject headers (Bcc) into the message.
const unsafeHeader = (values: ReadonlyArray<string>) => values.find((v) => /[\r\n]/.test(v))

const looksLikeAddress = (address: string) => /^[^@\s<>]+@[^@\s<>]+$|<[^@\s<>]+@[^@\s<>]+>$/.test(address.trim())

/** Non-ASCII header text as an RFC 2047 encoded word. */
const encodeHeader = (value: string) => (/^[\x20-\x7e]*$/.test(value) ? value : `=?UTF-8?B?${Buffer.from(value, "utf8").toString("base64")}?=`)

/** Base64 body lines of 76 characters (RFC 2045), so any text and any line length is safe. */
const encodeBody = (text: string) => Buffer.from(text, "utf8").toString("base64").replace(/.{76}(?=.)/g, "$&\r\n")

interface Email {
  readonly to: ReadonlyArray<string>
  readonly cc: ReadonlyArray<string> | undefined
  readonly bcc: ReadonlyArray<string> | undefined
  readonly subject: string
  readonly body: string
  readonly in_reply_to: string | undefined
}

export const rfc2822 = (email: Email): string => {
  const optional = (name: string, value: string | undefined) => (value === undefined || value === "" ? [] : [`${name}: ${value}`])
  return [
    `To: ${email.to.join(", ")}`,
    ...optional("Cc", email.cc?.join(", ")),
    ...optional("Bcc", email.bcc?.join(", ")),
    `Subject: ${encodeHeader(email.subject)}`,
    ...optional("In-Reply-To", email.in_reply_to),
    ...optional("References", email.in_reply_to),
    "MIME-Version: 1.0",
    "Content-Type: text/plain; charset=\"UTF-8\"",
    "Content-Transfer-Encoding: base64",
    "",
    encodeBody(email.body)
  ].join("\r\n")
}

const checkEmail = (email: Email): ToolFailure | undefined => {
  const addresses = [...email.to, ...(email.cc ?? []), ...(email.bcc ?? [])]
  if (email.to.length === 0) return new ToolFailure({ message: "At least one recipient is required in \"to\"." })
  const injected = unsafeHeader([...addresses, email.subject, email.in_reply_to ?? ""])
  if (injected !== undefined) return new ToolFailure({ message: "Header values must not contain line breaks." })
  const bad = addresses.find((a) => !looksLikeAddress(a))
  return bad === undefined ? undefined : new ToolFailure({ message: `Not an email address: "${bad}".` })
}

// ---- search_emails --------------------------------------------------------------------------

const header = (message: unknown, name: string) => {
  const found = asArray(get(message, "payload.headers")).find((h) => String(get(h, "name")).toLowerCase() === name.toLowerCase())
  return found === undefined ? undefined : get(found, "value")
}

const summary = (message: unknown) => ({
  id: get(message, "id"),
  thread_id: get(message, "threadId"),
  from: header(message, "From"),
  to: header(message, "To"),
  subject: header(message, "Subject"),
  date: header(message, "Date"),
  snippet: get(message, "snippet"),
  labels: get(message, "labelIds"),
  unread: asArray(get(message, "labelIds")).includes("UNREAD")
})

const metadata = (ctx: ToolContext, id: string) =>
  callApi(ctx, {
    method: "GET",
    path: `${messagesPath}/${encodeURIComponent(id)}`,
    query: { format: "metadata", metadataHeaders: ["From", "To", "Subject", "Date"] }
  }).pipe(Effect.map(summary))

// ---- tools ------------------------------------------------------------------------------------

const tools = [
  defineTool({
    name: "send_email",
    description: "Send a plain-text email from the user's Gmail account.",
    params: {
      to: { type: "array", description: "Recipient addresses, e.g. [\"ann@example.com\"].", required: true },
      subject: { type: "string", description: "Subject line.", required: true },
      body: { type: "string", description: "Plain-text body.", required: true },
      cc: { type: "array", description: "Cc addresses." },
      bcc: { type: "array", description: "Bcc addresses." },
      thread_id: { type: "string", description: "Gmail thread ID to send the message into (a reply)." },
      in_reply_to: { type: "string", description: "Message-ID header of the message being answered, e.g. <abc@mail.example>." }
    },
    run: (ctx, a) => {
      const email: Email = { to: a.to, cc: a.cc, bcc: a.bcc, subject: a.subject, body: a.body, in_reply_to: a.in_reply_to }
      const problem = checkEmail(email)
      if (problem !== undefined) return Effect.fail(problem)
      return callApi(ctx, {
        method: "POST",
        path: `${messagesPath}/send`,
        body: { raw: Buffer.from(rfc2822(email), "utf8").toString("base64url"), threadId: a.thread_id }
      }).pipe(Effect.map((body) => ({ id: get(body, "id"), thread_id: get(body, "threadId"), labels: get(body, "labelIds") })))
    }
  }),
  defineTool({
    name: "search_emails",
    description:
      `Search the mailbox with Gmail search syntax (e.g. \`from:ann@example.com is:unread newer_than:7d\`); returns sender, subject, date and snippet of up to ${maxSearchResults} messages.`,
    params: {
      query: { type: "string", description: "Gmail search query.", required: true },
      max_results: { type: "integer", description: `Maximum messages (1-${maxSearchResults}).`, minimum: 1, maximum: maxSearchResults, default: 10 }
    },
    run: (ctx, a) =>
      callApi(ctx, { method: "GET", path: messagesPath, query: { q: a.query, maxResults: a.max_results } }).pipe(
        Effect.flatMap((list) => {
          const ids = asArray(get(list, "messages"))
            .map((m) => get(m, "id"))
            .filter((id): id is string => typeof id === "string")
            .slice(0, a.max_results)
          return Effect.forEach(ids, (id) => metadata(ctx, id), { concurrency: 5 }).pipe(
            Effect.map((messages) => ({ result_size_estimate: get(list, "resultSizeEstimate") ?? 0, messages }))
          )
        })
      )
  })
]

export const Gmail: ToolApp = {
  slug: "gmail",
  name: "Gmail",
  defaultApiUrl: "https://gmail.googleapis.com",
  oauth: {
    authorizeUrl: "https://accounts.google.com/o/oauth2/v2/auth",
    tokenUrl: "https://oauth2.googleapis.com/token",
    scopes: ["https://www.googleapis.com/auth/gmail.send", "https://www.googleapis.com/auth/gmail.readonly"],
    scopeSeparator: " ",
    pkce: true,
    // Google returns a refresh token only with offline access, and again only on a fresh consent.
    extraAuthorizeParams: { access_type: "offline", prompt: "consent" }
  },
  tools
}
