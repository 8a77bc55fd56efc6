/**
 * Readers for untyped JSON (message data, cell metadata): each returns the
 * value when it has the expected type, else null. Pure.
 */

export type Dict = Record<string, unknown>;

/** A JSON object (not null, not an array). */
export function asDict(value: unknown): Dict | null {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Dict)
    : null;
}

/** A finite number. */
export function asNumber(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

export function asString(value: unknown): string | null {
  return typeof value === 'string' ? value : null;
}
