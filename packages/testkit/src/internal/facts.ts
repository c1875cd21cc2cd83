/** The runtime modules of `@maka/facts` and `effect` the builders use, in one place. */
export { Codec, Digest, EventWrite } from "@maka/facts"
export { Result } from "effect"
