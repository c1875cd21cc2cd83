/** `overrides` without its `undefined` fields: what a builder lays over its defaults. */
export const defined = <T extends object>(overrides: { readonly [K in keyof T]?: T[K] | undefined }): Partial<T> =>
  Object.fromEntries(Object.entries(overrides).filter(([, value]) => value !== undefined)) as Partial<T>
