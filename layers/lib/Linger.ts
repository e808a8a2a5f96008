// A writer's wait for more work before it writes a group (group commit): a plain timer on
// wall-clock time, which the writer's producers can cut short the moment waiting is pointless.
import { Effect } from "effect"

export interface Linger {
  /** Waits up to `ms`, unless cut short. */
  readonly wait: (ms: number) => Effect.Effect<void>
  /** Ends the wait under way at once; false when no wait is under way. */
  readonly cut: () => boolean
}

export const makeLinger = (): Linger => {
  let end: (() => void) | undefined
  return {
    wait: (ms) =>
      Effect.async<void>((resume) => {
        const stop = () => {
          clearTimeout(timer)
          end = undefined
        }
        const done = () => {
          stop()
          resume(Effect.void)
        }
        const timer = setTimeout(done, ms)
        end = done
        return Effect.sync(stop)
      }),
    cut: () => {
      if (end === undefined) return false
      end()
      return true
    }
  }
}
