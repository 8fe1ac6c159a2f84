import type { MessageDelivery } from '../../src/messages/message-delivery.interface.js';
import { MessageSettlement } from '../../src/messages/message-settlement.js';
import { GivenBackAtShutdown, MessagesInHand } from '../../src/messages/messages-in-hand.js';

/** A delivery that records how the broker was told to settle it. */
function recordedDelivery(): MessageDelivery & { settlements: string[] } {
  const settlements: string[] = [];
  const consumer = { stop: async () => void settlements.push('consumer stopped') };
  return {
    settlements,
    deliveries: 1,
    consumer,
    property: () => undefined,
    header: () => undefined,
    ack: () => settlements.push('ack'),
    ackAfterReply: () => settlements.push('ackAfterReply'),
    retryLater: (delayMs) => settlements.push(`retryLater ${delayMs}`),
    reject: () => settlements.push('reject'),
  };
}

describe('MessageSettlement: one message among its idempotent handlers', () => {
  const both = new Set(['Effects.audit', 'Effects.notify']);

  it('is acknowledged once every handler expected has acknowledged it, not before', () => {
    const delivery = recordedDelivery();
    let settled = 0;
    const settlement = new MessageSettlement(delivery, both, () => (settled += 1));
    settlement.of('Effects.audit').ack();
    expect(delivery.settlements).toEqual([]);
    settlement.of('Effects.notify').ack();
    expect(delivery.settlements).toEqual(['ack']);
    expect(settled).toBe(1);
  });

  it("is acknowledged after a request's reply when its handler asked for that", () => {
    const delivery = recordedDelivery();
    new MessageSettlement(delivery, new Set(), () => undefined).of('Quotes.create').ackAfterReply();
    expect(delivery.settlements).toEqual(['ackAfterReply']);
  });

  it('is given back, after the longest delay asked, when any handler must run again', () => {
    const delivery = recordedDelivery();
    const settlement = new MessageSettlement(delivery, both, () => undefined);
    settlement.of('Effects.notify').retryLater(400);
    settlement.of('Effects.audit').ack();
    expect(delivery.settlements).toEqual(['retryLater 400']);
  });

  it('is rejected when a handler refused it for good and none must run again', () => {
    const delivery = recordedDelivery();
    const settlement = new MessageSettlement(delivery, both, () => undefined);
    settlement.of('Effects.audit').reject();
    settlement.of('Effects.notify').ack();
    expect(delivery.settlements).toEqual(['reject']);
  });

  it("counts a handler's first settlement only, and settles the message once", () => {
    const delivery = recordedDelivery();
    const settlement = new MessageSettlement(delivery, both, () => undefined);
    settlement.of('Effects.audit').ack();
    settlement.of('Effects.audit').retryLater(100);
    settlement.of('Effects.notify').ack();
    settlement.of('Effects.notify').reject();
    expect(delivery.settlements).toEqual(['ack']);
  });

  it("settles on a handler's own settlement where no handler is expected (a pattern it does not know)", () => {
    const delivery = recordedDelivery();
    new MessageSettlement(delivery, new Set(), () => undefined).of('Quotes.create').ack();
    expect(delivery.settlements).toEqual(['ack']);
  });
});

describe('MessagesInHand: how many run at once, holds, and the drain', () => {
  it('admits `concurrency` messages at once, the next as one ends its turn, first come first served', async () => {
    const inHand = new MessagesInHand(2);
    const order: number[] = [];
    const turns = await Promise.all([inHand.admitted(), inHand.admitted()]);
    const third = inHand.admitted().then((end) => (order.push(3), end));
    const fourth = inHand.admitted().then((end) => (order.push(4), end));
    await Promise.resolve();
    expect(order).toEqual([]);
    turns[0]();
    turns[0](); // a turn ends once
    await third;
    expect(order).toEqual([3]);
    turns[1]();
    await fourth;
    expect(order).toEqual([3, 4]);
  });

  it('stops the consumers it has seen when the drain begins, and those it sees after at once', () => {
    const inHand = new MessagesInHand(1);
    const [early, late] = [recordedDelivery(), recordedDelivery()];
    inHand.taken({}, early.consumer);
    inHand.stopTaking();
    expect(early.settlements).toEqual(['consumer stopped']);
    inHand.taken({}, late.consumer);
    expect(late.settlements).toEqual(['consumer stopped']);
  });

  it('is idle, once the drain has begun, only when the consumers stopped can deliver no more', async () => {
    const inHand = new MessagesInHand(1);
    let cancelled!: () => void;
    const consumer = { stop: () => new Promise<void>((resolve) => (cancelled = resolve)) };
    const message = {};
    inHand.taken(message, consumer);
    inHand.settled(message);
    inHand.stopTaking();
    let idle = false;
    const waiting = inHand.idle().then(() => (idle = true));
    await new Promise((resolve) => setImmediate(resolve));
    expect(idle).toBe(false);
    cancelled();
    await waiting;
  });

  it('is idle once every message taken is settled', async () => {
    const inHand = new MessagesInHand(1);
    const [first, second] = [{}, {}];
    inHand.taken(first, recordedDelivery().consumer);
    inHand.taken(second, recordedDelivery().consumer);
    let idle = false;
    const waiting = inHand.idle().then(() => (idle = true));
    inHand.settled(first);
    await Promise.resolve();
    expect(idle).toBe(false);
    inHand.settled(second);
    await waiting;
    expect(inHand.inHand).toBe(0);
  });

  it('once the drain is over, ends the pauses of held messages and refuses those waiting for their turn', async () => {
    const inHand = new MessagesInHand(1);
    await inHand.admitted();
    const waiting = inHand.admitted();
    const pause = inHand.pause(60_000);
    inHand.giveBack();
    await expect(pause).resolves.toBe(false);
    await expect(waiting).rejects.toBeInstanceOf(GivenBackAtShutdown);
    await expect(inHand.admitted()).rejects.toBeInstanceOf(GivenBackAtShutdown);
    await expect(inHand.pause(10)).resolves.toBe(false);
  });

  it('resolves a pause true once its delay has passed', async () => {
    await expect(new MessagesInHand(1).pause(5)).resolves.toBe(true);
  });
});
