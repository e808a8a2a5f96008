// The tool results the host answers itself: app-level refusals are `isError` results the model
// can read, never Effect failures.
import type { PaymentRequired } from "../../schemas/Errors.js"
import type { ToolResult } from "./apps/ToolApp.js"

export const text = (message: string, isError = false): ToolResult => ({
  content: [{ type: "text", text: message }],
  ...(isError ? { isError: true } : {})
})

export const notConnected = (slug: string) =>
  text(
    `The ${slug} app is not connected for this user. Connect it first: have the platform call ` +
      `GET /oauth/authorize?app=${slug} on the tool service and open the returned location.`,
    true
  )

export const reauthNeeded = (slug: string) =>
  text(
    `The ${slug} connection was revoked or has expired and must be reconnected via ` +
      `/oauth/authorize?app=${slug} on the tool service.`,
    true
  )

/** A paid call refused by checks 3 to 5 before it ran: the refusal's code leads, as in a 402 body. */
export const refused = (refusal: PaymentRequired) =>
  text(`Tool call refused (${refusal.code}): ${refusal.message}. Nothing was charged.`, true)
