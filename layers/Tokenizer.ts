// Token counting for pre-flight estimates and for usage the upstream did not report
// (interrupted streams): a real BPE tokenizer (o200k, gpt-tokenizer), never a char heuristic.
import { countTokens } from "gpt-tokenizer"
import type { ChatMessage } from "../schemas/Chat.js"

const messageText = (message: ChatMessage): string => {
  const content = typeof message.content === "string"
    ? message.content
    : (message.content ?? []).map((part) => part.text ?? "").join("")
  const calls = (message.tool_calls ?? []).map((c) => c.function.name + c.function.arguments).join("")
  return content + calls
}

/** Prompt tokens of a chat request: content plus a small per-message framing overhead. */
export const countPromptTokens = (messages: ReadonlyArray<ChatMessage>): number =>
  messages.reduce((sum, m) => sum + countTokens(messageText(m)) + 4, 3)

export const countTextTokens = (text: string): number => text === "" ? 0 : countTokens(text)
