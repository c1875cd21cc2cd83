/**
 * The Effect API's optional inputs, given as `undefined` (a host under `exactOptionalPropertyTypes`
 * passing a value it may not have): the same as absent, for a message run and a standalone
 * compaction, never a refusal or a different request. Real SQLite file, the scripted server on
 * loopback.
 */
import { assert, describe, it } from "@effect/vitest"
import { FactBuilders, OpenAiSse, Respond } from "@maka/testkit"
import { ToolCatalog } from "@maka/tools"
import { Effect } from "effect"
import type * as Engine from "../src/Engine.ts"
import { kinds } from "./support/harness.ts"
import { input, setup } from "./support/setup.ts"

describe("optional inputs given as undefined", () => {
  it.live("are absent for a message run and a compaction", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            Respond.sse(OpenAiSse.response({ text: ["Hello back."] })),
            Respond.sse(OpenAiSse.response({ text: [FactBuilders.VALID_SUMMARY] })),
          ],
        })
        const absent = {
          maxSteps: undefined,
          allowPriorUnknown: undefined,
          providerOptions: undefined,
          context: undefined,
          mainOutputLimit: undefined,
          requestFingerprint: undefined,
          secrets: undefined,
          signal: undefined,
        } satisfies { readonly [K in keyof Engine.StartInput]?: undefined }
        const run = yield* context.engine.run(input(context, "Hello.", ToolCatalog.make([]), absent))
        assert.deepStrictEqual(run.outcome, { kind: "completed" })
        // A compaction's optional inputs are the run's but its step budget and prior-unknown choice.
        const { maxSteps: _maxSteps, allowPriorUnknown: _allow, ...compactAbsent } = absent
        compactAbsent satisfies { readonly [K in keyof Engine.CompactInput]?: undefined }
        const compacted = yield* context.engine.compact({
          invocation: FactBuilders.invocation({ turnId: "compact-turn", runId: "compact-run", invocationId: "compact-invocation" }),
          model: context.model,
          configuration: FactBuilders.configuration({ cwd: context.workspace, model: FactBuilders.modelBinding({ model: "test-model" }) }),
          ...compactAbsent,
        })
        assert.strictEqual(compacted.outcome.kind, "context_compact_finished")
        const requests = [0, 1].map((index) => JSON.parse(new TextDecoder().decode(context.server.requests()[index]!.rawBody)) as Record<string, unknown>)
        // The documented defaults: 8,000 output tokens, no provider options beside the request's own.
        assert.deepStrictEqual(
          requests.map((body) => body["max_tokens"]),
          [8_000, 8_000],
        )
        const events = yield* context.log.events("session-1")
        assert.include(kinds(events), "context_checkpoint_recorded")
      }),
    ))
})
