/**
 * Request-response over JetStream: a request is a message published to the stream with the subject its caller
 * listens on for the reply in this header (`JetStreamClient.send()` sets it); the server publishes the handler's
 * reply there, on core NATS, as JSON: `{ "response": value }`, or `{ "err": error }` for an error.
 */
export const REPLY_TO_HEADER = 'Nest-Reply-To';

export type JetStreamReply = { response?: unknown; err?: never } | { err: unknown; response?: never };

export function encodedReply(reply: JetStreamReply): Uint8Array {
  return Buffer.from(JSON.stringify(reply));
}

export function decodedReply(data: Uint8Array): JetStreamReply {
  return JSON.parse(Buffer.from(data).toString('utf8')) as JetStreamReply;
}
