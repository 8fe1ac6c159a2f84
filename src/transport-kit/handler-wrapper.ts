type Handler = (...args: never[]) => unknown;

/**
 * Makes `wrapper` stand in for `handler` on its class: it carries the handler's name, length and metadata, so that
 * Nest and other decorators read it as the handler itself, and `marker`, by which a second wrapping is skipped.
 */
export function standInFor<F extends Handler>(handler: F, wrapper: F, marker: symbol): F {
  for (const key of Reflect.getOwnMetadataKeys(handler)) {
    Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, handler), wrapper);
  }
  Object.defineProperty(wrapper, 'name', { value: handler.name });
  Object.defineProperty(wrapper, 'length', { value: handler.length });
  Object.defineProperty(wrapper, marker, { value: true });
  return wrapper;
}

/** Whether `handler` is already a wrapper marked with `marker`. */
export function isWrapped(handler: Handler, marker: symbol): boolean {
  return (handler as unknown as Record<symbol, unknown>)[marker] === true;
}
