// The released packages of the repository and their tarballs, shared by tools/pack-check.mjs and
// tools/consumer-test/run.mjs. A package is released unless its package.json says "private": true.
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"

export const ROOT = path.resolve(import.meta.dirname, "..")

/** `[{name, version, directory}]` of every non-private package under packages/, by directory name. */
export const releasedPackages = (root = ROOT) =>
  fs
    .readdirSync(path.join(root, "packages"))
    .sort()
    .map((entry) => path.join(root, "packages", entry))
    .filter((directory) => fs.existsSync(path.join(directory, "package.json")))
    .map((directory) => ({ directory, manifest: JSON.parse(fs.readFileSync(path.join(directory, "package.json"), "utf8")) }))
    .filter(({ manifest }) => manifest.private !== true)
    .map(({ directory, manifest }) => ({ name: manifest.name, version: manifest.version, directory }))

/** The file name `pnpm pack` gives a package: `@maka/event-log@0.1.0` → `maka-event-log-0.1.0.tgz`. */
export const tarballName = ({ name, version }) => `${name.replace(/^@/, "").replace("/", "-")}-${version}.tgz`

/**
 * Packs every released package into `destination` with `pnpm pack` (which applies `publishConfig`
 * and turns `workspace:` ranges into versions) and returns a Map from package name to tarball path.
 * Needs the packages built (`pnpm build`): a package without its `dist` is an error.
 */
export const packAll = (destination, root = ROOT) => {
  fs.mkdirSync(destination, { recursive: true })
  const tarballs = new Map()
  for (const pkg of releasedPackages(root)) {
    if (!fs.existsSync(path.join(pkg.directory, "dist"))) {
      throw new Error(`${pkg.name} has no dist: run \`pnpm build\` first`)
    }
    execFileSync("pnpm", ["pack", "--pack-destination", destination], { cwd: pkg.directory, stdio: "pipe" })
    const tarball = path.join(destination, tarballName(pkg))
    if (!fs.existsSync(tarball)) throw new Error(`pnpm pack wrote no ${tarball}`)
    tarballs.set(pkg.name, tarball)
  }
  return tarballs
}

/** Reuses the tarballs of every released package found in `directory`, or fails naming the missing one. */
export const existingTarballs = (directory, root = ROOT) => {
  const tarballs = new Map()
  for (const pkg of releasedPackages(root)) {
    const tarball = path.resolve(directory, tarballName(pkg))
    if (!fs.existsSync(tarball)) throw new Error(`no tarball of ${pkg.name} in ${directory} (expected ${tarballName(pkg)})`)
    tarballs.set(pkg.name, tarball)
  }
  return tarballs
}
