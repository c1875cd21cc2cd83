/**
 * What a stream has shown so far (docs/model.md §4.5): `observedOutput` turns true with the first
 * content-carrying event; `replaySafe` turns false with a `finished`, a provider-executed tool call or
 * any non-empty `providerOptions`.
 */
import type { Model } from "@maka/facts"
import { isNonEmpty } from "./provider-options.ts"

export class ReplayTracker {
  observedOutput = false
  replaySafe = true

  observe(event: Model.ModelEvent): void {
    switch (event.kind) {
      case "part_delta":
        this.observedOutput = true
        break
      case "tool_call":
        this.observedOutput = true
        if (event.providerExecuted) this.replaySafe = false
        break
      case "finished":
        this.replaySafe = false
        break
      default:
        break
    }
    if (event.kind !== "response_metadata" && isNonEmpty(event.providerOptions)) this.replaySafe = false
  }
}
