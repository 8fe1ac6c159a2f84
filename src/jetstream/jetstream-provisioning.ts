import { AckPolicy, JetStreamApiCodes, JetStreamApiError, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/transport-node';
import type { JetStreamServerOptions } from './jetstream-server-options.interface.js';

/**
 * Creates or updates what `options.provision` names: the stream (with the consumer's subjects) and the durable pull
 * consumer (explicit acks, `ack_wait`, `max_deliver`, `backoff`, the subjects as its filter).
 */
export async function provision(manager: JetStreamManager, options: JetStreamServerOptions): Promise<void> {
  const { stream, durable, subjects, provision = 'none' } = options;
  if (provision === 'none') return;
  if (provision === 'stream-and-consumer') {
    if (!subjects?.length) throw new RangeError("JetStreamServer: provision 'stream-and-consumer' needs subjects");
    const config = { ...options.streamConfig, subjects };
    try {
      await manager.streams.info(stream);
      await manager.streams.update(stream, config);
    } catch (error) {
      if (!isNotFound(error)) throw error;
      await manager.streams.add({ ...config, name: stream });
    }
  }
  const config = {
    durable_name: durable,
    ack_policy: AckPolicy.Explicit,
    ack_wait: nanos((options.ackWaitSeconds ?? 30) * 1000),
    max_deliver: options.maxDeliver ?? 5,
    ...(options.backoffSeconds ? { backoff: options.backoffSeconds.map((seconds) => nanos(seconds * 1000)) } : {}),
    ...filterOf(subjects),
  };
  try {
    await manager.consumers.info(stream, durable);
    await manager.consumers.update(stream, durable, config);
  } catch (error) {
    if (!isNotFound(error)) throw error;
    await manager.consumers.add(stream, config);
  }
}

function isNotFound(error: unknown): boolean {
  if (!(error instanceof JetStreamApiError)) return false;
  return error.code === JetStreamApiCodes.StreamNotFound || error.code === JetStreamApiCodes.ConsumerNotFound;
}

/** One subject as `filter_subject`, which every JetStream server knows; several as `filter_subjects` (2.10 on). */
function filterOf(subjects: string[] | undefined): { filter_subject?: string; filter_subjects?: string[] } {
  if (!subjects?.length) return {};
  return subjects.length === 1 ? { filter_subject: subjects[0] } : { filter_subjects: subjects };
}
