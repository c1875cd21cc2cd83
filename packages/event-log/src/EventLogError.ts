/**
 * `EventLogError`, the one error of `@maka/event-log` (docs/log-format.md §3.4). Callers switch on
 * `reason._tag`: `Rejected` carries the validation that refused a write, `OutcomeUnknown` a commit
 * whose result is unknown (never assume success), the rest are store conditions.
 */
import { Prompts } from "@maka/facts"
import { Data } from "effect"

export type Rejection =
  | { readonly _tag: "Sealed" }
  | { readonly _tag: "EventConflict" }
  | { readonly _tag: "SessionBusy" }
  | { readonly _tag: "Reserved" }
  | { readonly _tag: "InvalidTransition"; readonly reason: string }
  | { readonly _tag: "PayloadMismatch" }
  | { readonly _tag: "PrefixTooLarge" }

/** How a writer whose log file (or its `-wal`) left its path lost it (`WriterBusy` with `lost`, its `why`). */
export const FILE_REPLACED =
  "its file or its -wal was removed or replaced while this writer had it open: what it wrote since is not in the log"

/** How the message of a commit whose outcome is unknown (`OutcomeUnknown`) begins. */
export const OUTCOME_UNKNOWN_MESSAGE = "commit outcome unknown"

/** How the message of a lost lease (`WriterBusy` with `lost`) begins. */
export const LEASE_LOST_MESSAGE = "this process lost the writer's lease of the log"

export type Reason =
  | { readonly _tag: "Rejected"; readonly rejection: Rejection }
  | { readonly _tag: "OutcomeUnknown"; readonly message: string }
  | {
      readonly _tag: "WriterBusy"
      readonly path: string
      /**
       * This process held the lease and lost it unseen (its lease keeper ended): another writer may
       * have opened the log since, so it writes nothing more (docs/log-format.md §3.1).
       */
      readonly lost?: true
      /** How it was lost, when not by its keeper's end: another writer's open, the file removed. */
      readonly why?: string
      /**
       * Who holds it, when the system says (Linux's `/proc/locks`): `this process`, `process PID` (the
       * host of the lease keeper holding it, or another program holding the lock itself), or a
       * keeper whose host has ended.
       */
      readonly holder?: string
    }
  | { readonly _tag: "UnsupportedDatabase"; readonly message: string }
  | { readonly _tag: "ConnectionClosed" }
  | { readonly _tag: "Migration"; readonly message: string }
  | { readonly _tag: "Decode"; readonly message: string }
  | { readonly _tag: "Io"; readonly message: string }
  | { readonly _tag: "Database"; readonly message: string }

export class EventLogError extends Data.TaggedError("EventLogError")<{ readonly reason: Reason }> {
  override get message(): string {
    return describe(this.reason)
  }

  /** Whether the failure is a refusal of the write (nothing was written). */
  get isRejected(): boolean {
    return this.reason._tag === "Rejected"
  }
}

const describeRejection = (rejection: Rejection): string => {
  switch (rejection._tag) {
    case "Sealed":
      return "the invocation is sealed"
    case "EventConflict":
      return "a different event was already written under this id"
    case "SessionBusy":
      return "the session has another live invocation"
    case "Reserved":
      return Prompts.SESSION_RESERVED_MESSAGE
    case "InvalidTransition":
      return rejection.reason
    case "PayloadMismatch":
      return "the raw tool payload does not match its reference"
    case "PrefixTooLarge":
      return "the requested history exceeds its event or byte limit"
  }
}

export const describe = (reason: Reason): string => {
  switch (reason._tag) {
    case "Rejected":
      return `rejected: ${describeRejection(reason.rejection)}`
    case "OutcomeUnknown":
      return `${OUTCOME_UNKNOWN_MESSAGE}: ${reason.message}`
    case "WriterBusy":
      return reason.lost === true
        ? `${LEASE_LOST_MESSAGE} ${reason.path} (${reason.why ?? "its lease keeper ended"}); it writes nothing more to it`
        : `another writer holds the log ${reason.path}${reason.holder === undefined ? "" : ` (${reason.holder})`}`
    case "UnsupportedDatabase":
      return reason.message
    case "ConnectionClosed":
      return "the event log is closed"
    case "Migration":
    case "Decode":
    case "Io":
    case "Database":
      return `${reason._tag.toLowerCase()}: ${reason.message}`
  }
}

export const make = (reason: Reason): EventLogError => new EventLogError({ reason })
export const rejected = (rejection: Rejection): EventLogError => make({ _tag: "Rejected", rejection })
export const invalidTransition = (reason: string): EventLogError =>
  rejected({ _tag: "InvalidTransition", reason })
export const prefixTooLarge = (): EventLogError => rejected({ _tag: "PrefixTooLarge" })

export const isEventLogError = (value: unknown): value is EventLogError =>
  typeof value === "object" && value !== null && "_tag" in value && value._tag === "EventLogError"
