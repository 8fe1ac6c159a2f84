import { type IncomingHttpHeaders, request } from 'node:http';

/** A response as it went over the wire: its body is the bytes sent, in whatever content coding they were sent. */
export interface WireResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/**
 * POSTs a JSON body with Node's own client, which sends no `Accept-Encoding` of its own and decodes nothing
 * (supertest decodes a gzip body before the test sees it, which would hide what the server sent).
 */
export function postOnTheWire(url: string, headers: Record<string, string>, body: object): Promise<WireResponse> {
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const sent = request(
      url,
      { method: 'POST', headers: { 'content-type': 'application/json', ...headers } },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('error', reject);
        response.on('end', () =>
          resolve({ status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(chunks) }),
        );
      },
    );
    sent.on('error', reject);
    sent.end(payload);
  });
}
