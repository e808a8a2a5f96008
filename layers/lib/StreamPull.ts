// Runs an Effect Stream by pulling its channel, a batch at a time, for the one consumer whose
// cost matters per call: the chat route's SSE writer. Pulling costs far less before the first
// element than running the stream into a sink, and how the pull ends matters as much (hot-path
// rule "pull the stream; end it in a continuation", docs/performance.md).
import { Channel, Chunk, Effect, Either, Exit, Scope, Stream } from "effect"

/**
 * Hands each non-empty batch of `stream` to `write`, which answers undefined to go on at once or
 * an effect to wait for first (a socket's drain). Once the stream has ended, its finalizers have
 * run (the call's settlement among them).
 *
 * The channel is pulled in a scope of its own, closed only when the pull fails or is interrupted.
 * Closing it after a normal end did nothing useful and cost on every stream: the pulled
 * channel's finalizer always runs under the runtime captured when the pull began (a diff and two
 * patches of the fiber's FiberRefs) even when nothing is left to finalize. Nothing is left
 * because the channel ends in a continuation (`Channel.asVoid`): the executor runs the finalizers
 * of the stages inside it as the pull reaches the end, instead of keeping the outermost ones for
 * the scope. test/unit/streamPull.test.ts pins that: if an Effect release changed it, the
 * finalizer would be seen unrun at the end.
 */
export const pullEach = <A>(
  stream: Stream.Stream<A>,
  write: (batch: Chunk.Chunk<A>) => Effect.Effect<void> | undefined
): Effect.Effect<void> =>
  Effect.flatMap(Scope.make(), (scope) =>
    Effect.flatMap(Channel.toPullIn(Channel.asVoid(Stream.toChannel(stream)), scope), (pull) => {
      const loop: Effect.Effect<void> = Effect.flatMap(pull, (next) => {
        if (Either.isLeft(next)) return Effect.void
        const wait = Chunk.isEmpty(next.right) ? undefined : write(next.right)
        return wait === undefined ? loop : Effect.zipRight(wait, loop)
      })
      return loop
    }).pipe(Effect.onError((cause) => Scope.close(scope, Exit.failCause(cause)))))
