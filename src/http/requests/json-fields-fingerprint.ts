import { createHash } from 'node:crypto';
import { withSortedKeys } from '../../shared/canonical-json.js';
import { describedValue } from '../../protocol/described-value.js';
import type { FingerprintInput } from '../http-options.interface.js';
import { sha256Fingerprint } from './http-policy.js';

/** Which fields of a JSON body a fingerprint compares: exactly one of the two lists. */
export type JsonFieldsSelection =
  { include: string[]; exclude?: undefined } | { exclude: string[]; include?: undefined };

/** One level of the selected paths: a leaf selects (or removes) the whole value there. */
interface PathNode {
  leaf: boolean;
  children: Map<string, PathNode>;
}

/**
 * A fingerprint over chosen fields of a JSON body, for `@Idempotent({ fingerprint })` or the module's option:
 * sha256 of the method, the path with its query, the `Content-Type` and the canonical JSON (keys sorted at every
 * depth) of the body's selected fields: with `include`, only those; with `exclude`, all but those.
 *
 * - A field is a dotted path of object keys (`metadata.requestedAt`); paths do not reach into arrays (`*` is
 *   refused; `items.0` names a key `"0"` of an object, not an array's first item). A path stops at
 *   the first value that is not an object (an array, a string, `null`…): that value is included whole, or, with
 *   `exclude`, nothing is removed. An unexpected shape compares more, never less.
 * - An included field that is absent is compared as absent (`{}` and `{ "a": null }` differ).
 * - Values are compared as the handler gets them from `JSON.parse`: `1200.0` is `1200`, and a number too large for a
 *   double (`1e400`) is `Infinity`, neither `-Infinity` nor `null`.
 * - A body that is not JSON (a form, no body, a `Content-Type` other than `application/json` or `…+json`, a
 *   charset other than UTF-8, or bytes that do not parse) is fingerprinted as `sha256Fingerprint` does, on its
 *   raw bytes: its retries match only byte for byte, which can refuse a retry but never replays another request.
 *
 * The risk: two requests that differ only in an excluded (or not included) field are the same request; the second
 * is answered the first one's response. Leave out only fields that never change what the operation does.
 * Throws at once (so at start-up) on a selection that is not exactly one non-empty list of well-formed paths.
 */
export function jsonFieldsFingerprint(selection: JsonFieldsSelection): (input: FingerprintInput) => string {
  const { mode, paths } = checkedSelection(selection);
  const tree = pathTree(paths);
  const select = mode === 'include' ? (body: unknown) => included(body, tree) : (body: unknown) => excluded(body, tree);
  return (input) => {
    const body = parsedJsonBody(input);
    if (body === undefined) return sha256Fingerprint(input);
    // The first line holds no space, which the first line of sha256Fingerprint's text always does (method, space,
    // target): the two fingerprints never share a text.
    return createHash('sha256')
      .update(`json-fields\n${input.method} ${input.url}\n${input.contentType}\n${comparedJson(select(body.value))}`)
      .digest('hex');
  };
}

/**
 * The canonical JSON (keys sorted at every depth) of a parsed body. `JSON.parse` gives ±Infinity for a number too
 * large for a double (`1e400`), which JSON writes as `null`: when there is one, the text is followed by what each
 * `null` written stands for, so that `1e400`, `-1e400` and `null` differ as they do for the handler. Any other body
 * keeps the text of earlier versions, and so the fingerprints of stored records.
 */
function comparedJson(value: unknown): string {
  const nulls: string[] = [];
  const text = JSON.stringify(value, (_key, nested: unknown) => {
    if (nested === null || nested === Infinity || nested === -Infinity) nulls.push(String(nested));
    return withSortedKeys(nested);
  });
  // Canonical JSON holds no line break, so the appended line cannot be mistaken for any body's text.
  return nulls.some((written) => written !== 'null') ? `${text}\n${nulls.join(' ')}` : text;
}

/** Whether a media type is JSON: `application/json`, or any type with the `+json` suffix (`application/merge-patch+json`). */
function isJsonContentType(contentType: string): boolean {
  const [mediaType, ...parameters] = contentType.split(';');
  if (mediaType !== 'application/json' && !/^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+\+json$/.test(mediaType))
    return false;
  // JSON is UTF-8 (RFC 8259); another declared charset is not decoded here, and the raw bytes are compared instead.
  return parameters.every((parameter) => {
    const [name, value = ''] = parameter.split('=');
    return name !== 'charset' || value.replace(/^"|"$/g, '') === 'utf-8';
  });
}

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The parsed JSON body, as the body parser gives it to the handler, or `undefined` when it is not JSON. */
function parsedJsonBody({ contentType, body }: FingerprintInput): { value: unknown } | undefined {
  if (!isJsonContentType(contentType) || body.length === 0) return undefined;
  try {
    return { value: JSON.parse(utf8.decode(body)) as unknown };
  } catch {
    return undefined;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** Objects built here have no prototype, so that a `__proto__` key is a field like any other. */
function emptyObject(): Record<string, unknown> {
  return Object.create(null) as Record<string, unknown>;
}

function included(value: unknown, node: PathNode): unknown {
  if (node.leaf || !isObject(value)) return value;
  const kept = emptyObject();
  for (const [key, child] of node.children) {
    if (Object.hasOwn(value, key)) kept[key] = included(value[key], child);
  }
  return kept;
}

function excluded(value: unknown, node: PathNode): unknown {
  if (!isObject(value)) return value;
  const kept = emptyObject();
  for (const [key, nested] of Object.entries(value)) {
    const child = node.children.get(key);
    if (child === undefined) kept[key] = nested;
    else if (!child.leaf) kept[key] = excluded(nested, child);
  }
  return kept;
}

function pathTree(paths: string[]): PathNode {
  const root: PathNode = { leaf: false, children: new Map() };
  for (const path of paths) {
    let node = root;
    for (const key of path.split('.')) {
      let child = node.children.get(key);
      if (child === undefined) node.children.set(key, (child = { leaf: false, children: new Map() }));
      node = child;
    }
    node.leaf = true; // a shorter path covers the longer ones under it
  }
  return root;
}

function checkedSelection(selection: JsonFieldsSelection): { mode: 'include' | 'exclude'; paths: string[] } {
  const name = 'Idempotency option fingerprint: jsonFieldsFingerprint()';
  if (!isObject(selection)) {
    throw new TypeError(`${name} takes { include } or { exclude }, got ${describedValue(selection)}`);
  }
  const { include, exclude } = selection;
  if (include !== undefined && exclude !== undefined) {
    throw new RangeError(
      `${name} takes exactly one of include or exclude, got both: list the fields that count, or those that do not`,
    );
  }
  if (include === undefined && exclude === undefined) {
    throw new RangeError(`${name} takes exactly one of include or exclude, got neither`);
  }
  const mode = include !== undefined ? 'include' : 'exclude';
  const paths: unknown = include ?? exclude;
  if (!Array.isArray(paths)) {
    throw new TypeError(`${name} ${mode} must be an array of dotted paths, got ${describedValue(paths)}`);
  }
  if (paths.length === 0) {
    throw new RangeError(
      `${name} ${mode} must list at least one field, got an empty array` +
        (mode === 'exclude' ? ' (for no field left out, use the default fingerprint)' : ''),
    );
  }
  paths.forEach((path: unknown, index) => {
    if (typeof path !== 'string') {
      throw new TypeError(`${name} ${mode}[${index}] must be a dotted path, got ${describedValue(path)}`);
    }
    const keys = path.split('.');
    if (keys.some((key) => key === '')) {
      throw new RangeError(
        `${name} ${mode}[${index}] must be object keys joined by dots, none empty, got ${describedValue(path)}`,
      );
    }
    if (keys.includes('*')) {
      throw new RangeError(
        `${name} ${mode}[${index}] must not hold a wildcard: paths do not reach into arrays (a path stops at an ` +
          `array, which counts whole), got ${describedValue(path)}`,
      );
    }
  });
  return { mode, paths: paths as string[] };
}
