/**
 * How the CLI builds a run's configuration (docs/cli.md §10.1): pure functions of the flags, never of
 * time, host or process, so two builds of the CLI write the same opening and a run started by one
 * process can be resumed by another.
 */
/** The system prompt of every CLI run. */
export const CLI_SYSTEM_PROMPT =
  "You are maka, a careful assistant working in the user's workspace through the tools you are offered. " +
  "Look at files before you describe them, say what you did and what you found, and keep answers short."

export type ProviderName = "openai-compatible" | "anthropic" | "offline"

export const PROVIDERS: ReadonlyArray<ProviderName> = ["openai-compatible", "anthropic", "offline"]

export type ToolLevel = "none" | "read" | "write" | "all"

export const TOOL_LEVELS: ReadonlyArray<ToolLevel> = ["none", "read", "write", "all"]

/** The defaults and ranges of the run flags. */
export const defaults = Object.freeze({
  database: ".maka/events.sqlite",
  tools: "read" satisfies ToolLevel,
  maxSteps: 32,
  maxStepsRange: [1, 256] as const,
  idleTimeoutSeconds: 120,
  idleTimeoutRange: [1, 300] as const,
})

/**
 * The base URL as docs/architecture.md §6 normalises it (trailing slashes removed), the same rule as
 * `ProviderConfig.normalizeBaseUrl` of `@maka/model` (a test holds them equal); kept here so `maka
 * --help` loads no engine module.
 */
export const normalizeBaseUrl = (baseUrl: string): string => baseUrl.replace(/\/+$/, "")

/** The public model identity: `{id: "<provider>:<normalised baseUrl>", slug: "<provider>"}`. */
export const connectionOf = (provider: ProviderName, baseUrl: string): { readonly id: string; readonly slug: string } => ({
  id: `${provider}:${normalizeBaseUrl(baseUrl)}`,
  slug: provider,
})

export interface WindowFlags {
  readonly contextWindow?: number | undefined
  readonly declaredWindow?: number | undefined
}

/** The request context the CLI always writes; absent flags are absent fields. */
export const contextOf = (
  provider: ProviderName,
  windows: WindowFlags,
): {
  readonly providerId: string
  readonly contextWindow?: number
  readonly modelContextWindow?: number
  readonly declaredWindow?: number
} => ({
  providerId: provider,
  ...(windows.contextWindow === undefined
    ? {}
    : { contextWindow: windows.contextWindow, modelContextWindow: windows.contextWindow }),
  ...(windows.declaredWindow === undefined ? {} : { declaredWindow: windows.declaredWindow }),
})
