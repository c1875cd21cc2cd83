/**
 * Every named limit and default of the durable format (docs/architecture.md §1.2). Other packages read these
 * constants instead of repeating numbers, so one change moves every check that depends on it.
 */

const KIB = 1024
const MIB = 1024 * KIB

export const MAX_ID_UTF16 = 512
export const MAX_OPERATION_ID_UTF16 = 2 * MAX_ID_UTF16 + 1
export const MAX_MESSAGE_TEXT_BYTES = 64 * KIB
export const MAX_DELIVERED_MESSAGE_BYTES = 1 * MIB
export const MAX_EVENT_BYTES = 1 * MIB
export const MAX_RAW_TOOL_RESULT_BYTES = 64 * MIB
export const MAX_RAW_TOOL_RESULT_DEPTH = 64
export const MAX_PROJECTION_BYTES = 256 * KIB
export const MAX_PROJECTION_NODES = 20_000
export const MAX_PROJECTION_DEPTH = 32
export const MAX_SUMMARY_BYTES = 256 * KIB
export const MAX_FAILURE_MESSAGE = 2_048
export const MAX_PROVIDER_MESSAGE_BYTES = 4 * KIB
export const MAX_HISTORY_EVENTS = 10_000
export const MAX_HISTORY_BYTES = 8 * MIB
export const PRUNE_PAGE_CANDIDATES = 128
export const PRUNE_PAGE_BYTES = 4 * MIB
export const MAX_PRUNE_CANDIDATES = 10_000
export const MAX_PRUNE_BYTES = 32 * MIB
export const PRUNE_CANDIDATE_OVERHEAD = 128
export const MAX_PAGE_CHARS = 7_500
export const MAX_ARCHIVE_BYTES = 4 * MIB
export const MAX_ARCHIVE_REF_CHARS = 16_384
export const MAX_ARCHIVABLE_FAILURE_BYTES = 256 * KIB
export const MAX_STEPS = 256
/**
 * The most local tool calls one main model step may hold (docs/engine.md §5.6): the next request
 * carries the step whole, and a fit pass can fold everything before it but never split it, so the
 * step must fit the read limits on its own. 128 results just under one page (about 23 KB each in
 * three-byte characters), their dispatches and the step's completion (at most 1 MiB each) hold
 * about 5 MB; with the steering the next request carries (the engine queues at most 1 MiB) and the
 * summary and opening a checkpoint re-sends, that stays under `MAX_HISTORY_BYTES`.
 */
export const MAX_TOOL_CALLS_PER_STEP = 128
export const DEFAULT_MAX_STEPS = 32
export const DEFAULT_OUTPUT_LIMIT = 8_000
export const SUMMARY_OUTPUT_CAP = 8_000
export const OUTPUT_RESERVE = 8_000
export const MAX_MAIN_OUTPUT_LIMIT = 10_000_000_000
export const MAX_WINDOW = Number.MAX_SAFE_INTEGER
export const MAX_ANCESTRY = 64
export const MAX_MODEL_ATTEMPTS = 10
export const BACKOFF_INITIAL_MS = 1_000
export const BACKOFF_MAX_MS = 32_000
export const BACKOFF_JITTER = 0.25
export const MAX_RETRY_AFTER_MS = 2 ** 31 - 1
export const IDLE_TIMEOUT_MS = 120_000
export const MIN_IDLE_TIMEOUT_MS = 1_000
export const MAX_IDLE_TIMEOUT_MS = 300_000
export const CLEANUP_GRACE_MS = 6_000
export const MAX_DELTA_CHARS = 8_192
export const MAX_MODEL_OUTPUT_BYTES = 64 * MIB
export const MAX_STREAM_EVENT_BYTES = 8 * MIB
export const MAX_REQUEST_BYTES = 32 * MIB
export const MAX_ERROR_BODY_BYTES = 64 * KIB
export const MODEL_CONCURRENCY = 4
export const MAX_UNKNOWN_NOTICE_LINES = 64
export const PENDING_HANDOFF_PAGE = 64
export const MAX_CWD_BYTES = 4_096
export const MAX_SYSTEM_PROMPT_BYTES = 64 * KIB
export const MAX_HANDOFF_TOOL_NAMES = 128
export const MAX_HANDOFF_TOOL_NAME_CHARS = 128
export const MAX_TOOL_NAME_CHARS = 64
export const FOLD_FLOOR_INPUT_TOKENS = 10_000
export const FOLD_FLOOR_OUTPUT_TOKENS = 200
