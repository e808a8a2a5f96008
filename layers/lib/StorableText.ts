// Text Postgres can store: no NUL (text and jsonb refuse it) and no unpaired UTF-16 surrogate
// (jsonb refuses `\ud800`; text columns would silently store U+FFFD). Refused in what clients
// send, replaced by U+FFFD in what upstreams answer before it is stored.

// `isWellFormed`/`toWellFormed` are ES2024 (V8 11, so Node 20); the compiler's lib is ES2022.
declare global {
  interface String {
    isWellFormed(): boolean
    toWellFormed(): string
  }
}

export const isStorableText = (s: string): boolean => s.isWellFormed() && !s.includes("\u0000")

/** The text with each NUL and unpaired surrogate replaced by U+FFFD. */
export const toStorableText = (s: string): string =>
  isStorableText(s) ? s : s.toWellFormed().replaceAll("\u0000", "\ufffd")

/** Where a JSON value holds unstorable text: the path to it, and whether it is an object key. */
export interface UnstorableAt {
  readonly path: ReadonlyArray<string | number>
  readonly inKey: boolean
}

/** The first string (value or object key) of a JSON value, in document order, that Postgres cannot store. */
export const findUnstorable = (value: unknown, path: ReadonlyArray<string | number> = []): UnstorableAt | undefined => {
  if (typeof value === "string") return isStorableText(value) ? undefined : { path, inKey: false }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = findUnstorable(value[i], [...path, i])
      if (found !== undefined) return found
    }
    return undefined
  }
  if (value !== null && typeof value === "object") {
    for (const [key, item] of Object.entries(value)) {
      if (!isStorableText(key)) return { path: [...path, key], inKey: true }
      const found = findUnstorable(item, [...path, key])
      if (found !== undefined) return found
    }
  }
  return undefined
}

/**
 * The JSON value with every string (keys included) made storable; the value itself when nothing
 * needed it (the common case costs one walk and no copy).
 */
export const toStorable = <A>(value: A): A => (findUnstorable(value) === undefined ? value : storableCopy(value) as A)

const storableCopy = (value: unknown): unknown => {
  if (typeof value === "string") return toStorableText(value)
  if (Array.isArray(value)) return value.map(storableCopy)
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [toStorableText(k), storableCopy(v)]))
  }
  return value
}
