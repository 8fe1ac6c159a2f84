export default async function globalTeardown() {
  await globalThis.embeddedDatabase?.stop();
}
