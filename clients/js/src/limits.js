/** Numbers the wire format fixes, and the defaults of the limits a receiver applies (PROTOCOL.md section 12). */

/** Length of the ASCII-decimal header in front of every frame body. */
export const HEADER_BYTES = 8;
/** The largest body an 8-digit header can describe. */
export const MAX_BODY_BYTES = 99_999_999;
/** Default cap on one frame's body: 64 MiB. */
export const DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024;
/** Most containers nested in one body (msgpack-python's own stack takes 1,024). */
export const MAX_DEPTH = 1024;
/** Longest numpy dtype string accepted. */
export const MAX_DTYPE_CHARS = 16;
/** Longest complex repr accepted. */
export const MAX_COMPLEX_CHARS = 64;
