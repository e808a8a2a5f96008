// How a request that failed its schema is explained to the client: the field's path and a short
// reason ("is missing", "must be one of: a, b"), never the schema's rendering of types and
// refinements nor the value sent; the full formatted issue is for the server log only.
import type { HttpApiError } from "@effect/platform"

type Issue = HttpApiError.HttpApiDecodeError["issues"][number]

export interface ClientValidation {
  /** The field's dotted path (`messages.0.role`); undefined for the body as a whole. */
  readonly param: string | undefined
  /** `<param or "body">: <reason>`. */
  readonly message: string
}

/** Our own annotation messages are written for clients; anything longer is cut. */
const MAX_CUSTOM_MESSAGE = 200

/** The expected-versus-actual shape of Effect Schema's built-in messages (the actual is dropped). */
const EXPECTED = /^Expected ([\s\S]*?), actual [\s\S]*$/
const UNDECODABLE = /^Unable to decode [\s\S]* into an? (\w+)$/

// Descriptions Effect Schema gives its built-in refinements, in the client's words.
const DESCRIBED: ReadonlyArray<readonly [RegExp, (...groups: Array<string>) => string]> = [
  [/^a number between (\S+) and (\S+)$/, (a, b) => `must be between ${a} and ${b}`],
  [/^a number greater than or equal to (\S+)$/, (n) => `must be at least ${n}`],
  [/^a number greater than (\S+)$/, (n) => `must be greater than ${n}`],
  [/^a number less than or equal to (\S+)$/, (n) => `must be at most ${n}`],
  [/^a number less than (\S+)$/, (n) => `must be less than ${n}`],
  [/^a string at least (\d+) character\(s\) long$/, (n) => n === "1" ? "must not be empty" : `must be at least ${n} characters long`],
  [/^a string at most (\d+) character\(s\) long$/, (n) => `must be at most ${n} characters long`],
  [/^a string (\d+) character\(s\) long$/, (n) => `must be exactly ${n} characters long`],
  [/^an array of at least (\d+) item\(s\)$/, (n) => `must have at least ${n} item(s)`],
  [/^an array of at most (\d+) item\(s\)$/, (n) => `must have at most ${n} item(s)`],
  [/^a string matching the pattern /, () => "has an invalid format"]
]

const PLAIN: Readonly<Record<string, string>> = {
  string: "must be a string",
  number: "must be a number",
  boolean: "must be true or false",
  object: "must be an object",
  "an integer": "must be an integer",
  "a finite number": "must be a finite number",
  "a positive number": "must be greater than 0",
  "a non-negative number": "must be 0 or more",
  "a negative number": "must be less than 0",
  "a non-positive number": "must be 0 or less",
  "a non empty string": "must not be empty",
  "a string with no leading or trailing whitespace": "must not start or end with whitespace",
  "a valid Date": "must be a valid date",
  "a positive BigDecimal": "must be greater than 0",
  "a non-negative BigDecimal": "must be 0 or more"
}

const UNDECODABLE_AS: Readonly<Record<string, string>> = {
  number: "must be a number",
  BigDecimal: "must be a decimal number",
  Date: "must be a valid date",
  bigint: "must be an integer"
}

/** The literal values of an expected `"a" | "b" | 1` (undefined when it is anything else). */
const literalsOf = (expected: string): Array<string> | undefined => {
  const values: Array<string> = []
  for (const alternative of expected.split(" | ")) {
    if (/^"[^"]*"$/.test(alternative)) values.push(alternative.slice(1, -1))
    else if (/^-?\d+(\.\d+)?$|^true$|^false$/.test(alternative)) values.push(alternative)
    else return undefined
  }
  return values
}

/** What an `Expected X` asks for, in words; undefined when X is only an optional's `undefined`/`null`. */
const describeExpected = (expected: string): string | undefined => {
  const plain = expected.replace(/ & Brand<[^>]*>/g, "")
  if (plain === "undefined" || plain === "null") return undefined
  const known = PLAIN[plain]
  if (known !== undefined) return known
  for (const [pattern, say] of DESCRIBED) {
    const match = pattern.exec(plain)
    if (match !== null) return say(...match.slice(1))
  }
  const literals = literalsOf(plain)
  if (literals !== undefined) return literals.length === 1 ? `must be ${literals[0]}` : `must be one of: ${literals.join(", ")}`
  if (plain.startsWith("{")) return "must be an object"
  if (/^(ReadonlyArray<|Array<|readonly \[)/.test(plain)) return "must be an array"
  return "is invalid"
}

/** The reason one issue gives; undefined when it only says an optional's other alternative did not match. */
const reasonOf = (issue: Issue): string | undefined => {
  switch (issue._tag) {
    case "Missing":
      return "is missing"
    case "Unexpected":
      return "is not an allowed field"
    case "Forbidden":
      return "is not allowed"
  }
  const expected = EXPECTED.exec(issue.message)
  if (expected !== null) return describeExpected(expected[1]!)
  const undecodable = UNDECODABLE.exec(issue.message)
  if (undecodable !== null) return UNDECODABLE_AS[undecodable[1]!] ?? "is invalid"
  // An annotation's message (ours, written for clients), or a JSON parser's.
  return issue.message.length > MAX_CUSTOM_MESSAGE ? `${issue.message.slice(0, MAX_CUSTOM_MESSAGE)}...` : issue.message
}

const samePath = (a: Issue["path"], b: Issue["path"]) => a.length === b.length && a.every((key, i) => key === b[i])

/**
 * How telling an issue is: in a union, the alternative that matches the value's shape fails
 * deepest (an array item's field rather than "input must be a string"), and at one depth an
 * alternative whose literal (its `type`) did not match is the wrong one, not the field's fault.
 */
const weight = (issue: Issue): number =>
  issue.path.length * 2 + (issue._tag === "Type" && literalsOf(EXPECTED.exec(issue.message)?.[1] ?? "") !== undefined ? 0 : 1)

/**
 * The most telling issue that says something (the first of them), at its path. A union of
 * literals is named whole ("must be one of"), though Schema reports one issue per alternative.
 */
export const clientValidation = (issues: ReadonlyArray<Issue>): ClientValidation => {
  const primary = issues
    .filter((issue) => reasonOf(issue) !== undefined)
    .reduce<Issue | undefined>((best, issue) => best === undefined || weight(issue) > weight(best) ? issue : best, undefined) ??
    issues[0]
  if (primary === undefined) return { param: undefined, message: "body: is invalid" }
  const param = primary.path.length > 0 ? primary.path.map(String).join(".") : undefined
  let reason = reasonOf(primary) ?? "is invalid"
  const expected = EXPECTED.exec(primary.message)
  if (expected !== null && literalsOf(expected[1]!) !== undefined) {
    const literals = issues
      .filter((issue) => samePath(issue.path, primary.path))
      .flatMap((issue) => literalsOf(EXPECTED.exec(issue.message)?.[1] ?? "") ?? [])
    const distinct = [...new Set(literals)]
    reason = distinct.length === 1 ? `must be ${distinct[0]}` : `must be one of: ${distinct.join(", ")}`
  }
  return { param, message: `${param ?? "body"}: ${reason}` }
}
