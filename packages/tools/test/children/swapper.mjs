// Swaps `target` between the real entry it starts as (a file or a directory) and a symbolic link to
// `outside`, as fast as it can, until it receives SIGTERM; it prints its exchange count every 200
// exchanges and once more when it stops.
// A builtin that writes into the gap (a new file or directory at `target`) is cleared away.
import * as fs from "node:fs"

const [target, outside] = process.argv.slice(2)
const aside = `${target}.aside`
const link = `${target}.link`
let exchanges = 0
let stopping = false

/** Removes `entry` if it can; a builtin writing into it meanwhile only makes the caller try again. */
const clear = (entry) => {
  try {
    fs.rmSync(entry, { recursive: true, force: true })
  } catch {
    // The next rename attempt clears again.
  }
}

/** Renames `from` over `to`, clearing away whatever a builtin created at `to` meanwhile. */
const replace = (from, to) => {
  for (let attempt = 0; ; attempt++) {
    try {
      fs.renameSync(from, to)
      return
    } catch (error) {
      if (attempt > 1_000) throw error
      clear(to)
    }
  }
}

const toLink = () => {
  fs.renameSync(target, aside)
  clear(link)
  fs.symlinkSync(outside, link)
  replace(link, target)
}

const toReal = () => replace(aside, target)

const batch = () => {
  for (let index = 0; index < 20 && !stopping; index++) {
    toLink()
    toReal()
    exchanges += 2
    if (exchanges % 200 === 0) process.stdout.write(`${exchanges}\n`)
  }
  if (stopping) finish()
  else setImmediate(batch)
}

const finish = () => {
  process.stdout.write(`${exchanges}\n`, () => process.exit(0))
}

process.on("SIGTERM", () => {
  stopping = true
})
process.stdout.write("ready\n")
setImmediate(batch)
