/**
 * @maka/engine: the maka agent engine. Admission, the step loop, retries, cancellation, recovery and
 * the prompt built from facts; the Promise facade for callers who do not use Effect.
 */
export * as Engine from "./Engine.ts"
export * as EngineError from "./EngineError.ts"
export * as PromptBuilder from "./PromptBuilder.ts"
export * as Recovery from "./Recovery.ts"
export * as Facade from "./Facade.ts"
export { createEngine } from "./Facade.ts"
export * as Agent from "./Agent.ts"
