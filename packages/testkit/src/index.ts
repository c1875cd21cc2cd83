/**
 * @maka/testkit: helpers for testing agents built on maka. Pure builders of valid facts and small
 * histories; the scripted model server arrives with the model package.
 */
export * as FactBuilders from "./FactBuilders.ts"
export * as History from "./History.ts"
