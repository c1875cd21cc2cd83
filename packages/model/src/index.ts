/**
 * @maka/model: provider adapters (OpenAI-compatible chat completions, Anthropic Messages) streamed into
 * the runtime-owned `ModelEvent` vocabulary of `@maka/facts`, the route projection, the step builder,
 * the concurrency limiter and `ModelError` with its classification (docs/architecture.md §6, docs/model.md §4).
 */
export * as ErrorClassification from "./ErrorClassification.ts"
export * as LanguageModel from "./LanguageModel.ts"
export * as ModelDefaults from "./ModelDefaults.ts"
export * as ModelError from "./ModelError.ts"
export * as ModelLimiter from "./ModelLimiter.ts"
export * as Projection from "./Projection.ts"
export * as ProviderConfig from "./ProviderConfig.ts"
export * as StepBuilder from "./StepBuilder.ts"
export { projectPrompt } from "./Projection.ts"
