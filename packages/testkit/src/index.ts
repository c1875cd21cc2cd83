/**
 * @maka/testkit: helpers for testing agents built on maka. Pure builders of valid facts and small
 * histories, and the scripted model server with its responders and SSE chunk builders.
 */
export * as AnthropicSse from "./AnthropicSse.ts"
export * as FactBuilders from "./FactBuilders.ts"
export * as History from "./History.ts"
export * as OpenAiSse from "./OpenAiSse.ts"
export * as Respond from "./Respond.ts"
export * as ScriptedServer from "./ScriptedServer.ts"
