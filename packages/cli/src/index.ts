/**
 * @maka/cli: the `maka` command. The library entry exposes the CLI's configuration rules
 * (`CLI_SYSTEM_PROMPT`, connection and context), the offline model and the usage text; `bin.ts` is
 * the executable.
 */
export * as Configuration from "./Configuration.ts"
export { CLI_SYSTEM_PROMPT } from "./Configuration.ts"
export * as OfflineModel from "./OfflineModel.ts"
export * as Usage from "./Usage.ts"
