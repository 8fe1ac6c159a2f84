/** Methods that do nothing once an object's answer is out, by name: what each returns to its caller. */
export type NoOpMethods = Readonly<Record<string, (this: object) => unknown>>;

/** Per set of no-ops: the prototype made from each prototype it silenced, and the prototypes so made. */
const derivedPrototypes = new WeakMap<NoOpMethods, { from: WeakMap<object, object>; made: WeakSet<object> }>();

/**
 * From now on `target`'s methods named in `noOps` do nothing. No property is added to it: its prototype becomes one
 * that answers them with the no-ops (made once per prototype, and inheriting from it), and only the methods it holds
 * as its own (a middleware's wrapper, the response capture's) are replaced on it. Each property added to Express's
 * response gives V8 a hidden class of its own (some 4 µs on every response), where a change of prototype is one cached
 * transition.
 */
export function silenceMethods(target: object, noOps: NoOpMethods): void {
  let derived = derivedPrototypes.get(noOps);
  if (!derived) derivedPrototypes.set(noOps, (derived = { from: new WeakMap(), made: new WeakSet() }));
  const prototype = Object.getPrototypeOf(target) as object | null;
  if (prototype === null || !derived.made.has(prototype)) {
    const key = prototype ?? derivedPrototypes; // any object stands for the null prototype
    let silenced = derived.from.get(key);
    if (!silenced) {
      silenced = Object.assign(Object.create(prototype) as object, noOps);
      derived.from.set(key, silenced);
      derived.made.add(silenced);
    }
    Object.setPrototypeOf(target, silenced);
  }
  const own = target as Record<string, unknown>;
  for (const name of Object.keys(noOps)) if (Object.hasOwn(target, name)) own[name] = noOps[name];
}
