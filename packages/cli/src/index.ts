/**
 * @maka/cli: the `maka` command. The library entry exposes the usage text; `bin.ts` is the executable.
 */
export * as Usage from "./Usage.ts"
