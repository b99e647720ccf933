// Scheduling and cancelling, deferral, dead-lettering, the max delivery count, lock renewal and the
// properties a receiver modifies as it settles.
"use strict";
const { client, result, run, text } = require("./common");

async function receiveOne(receiver, wait = 10000) {
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: wait });
  if (!m) throw new Error("no message arrived");
  return m;
}

run(async () => {
  const { QUEUE: queue, MAX_DELIVERY_QUEUE: maxDeliveryQueue } = process.env;
  const sb = client();
  const sender = sb.createSender(queue);
  const receiver = sb.createReceiver(queue);

  // A message scheduled an hour ahead peeks as scheduled whenever the peek runs (a busy machine cannot make
  // it due); a cancelled one never shows. Then one scheduled 2 s ahead: it arrives, and not before its time
  // (the namespace runs on this host's clock).
  const later = new Date(Date.now() + 3600e3);
  const [waiting] = await sender.scheduleMessages({ body: "later" }, later);
  const [cancelled] = await sender.scheduleMessages({ body: "cancelled" }, later);
  await sender.cancelScheduledMessages(cancelled);
  const peeked = await receiver.peekMessages(10);
  await sender.cancelScheduledMessages(waiting);
  const soon = new Date(Date.now() + 2000);
  const [kept] = await sender.scheduleMessages({ body: "scheduled" }, soon);
  const due = await receiveOne(receiver, 30000);
  const arrivedAt = Date.now();
  await receiver.completeMessage(due);
  result({
    scheduled: {
      peeked: peeked.map((m) => [text(m.body), m.state]),
      received: text(due.body),
      early: arrivedAt < soon.getTime(),
    },
    scheduledSequence: Number(kept) === Number(due.sequenceNumber),
  });

  await sender.sendMessages({ body: "deferred" });
  const toDefer = await receiveOne(receiver);
  const lockedUntil = toDefer.lockedUntilUtc.getTime();
  const renewedUntil = (await receiver.renewMessageLock(toDefer)).getTime();
  await receiver.deferMessage(toDefer);
  const [deferred] = await receiver.receiveDeferredMessages(toDefer.sequenceNumber);
  await receiver.completeMessage(deferred);
  result({ deferred: { body: text(deferred.body), state: deferred.state }, renewed: renewedUntil >= lockedUntil });

  await sender.sendMessages({ body: "poison" });
  const poison = await receiveOne(receiver);
  await receiver.deadLetterMessage(poison, { deadLetterReason: "bad", deadLetterErrorDescription: "very bad" });
  const dlq = sb.createReceiver(queue, { subQueueType: "deadLetter" });
  const dead = await receiveOne(dlq);
  await dlq.completeMessage(dead);
  result({ deadLettered: [text(dead.body), dead.deadLetterReason, dead.deadLetterErrorDescription] });

  await sb.createSender(maxDeliveryQueue).sendMessages({ body: "twice" });
  const tries = sb.createReceiver(maxDeliveryQueue);
  const counts = [];
  for (let i = 0; i < 2; i++) {
    const m = await receiveOne(tries);
    counts.push(m.deliveryCount);
    await tries.abandonMessage(m);
  }
  const maxDlq = sb.createReceiver(maxDeliveryQueue, { subQueueType: "deadLetter" });
  const exceeded = await receiveOne(maxDlq);
  await maxDlq.completeMessage(exceeded);
  result({ deliveryCounts: counts, maxDelivery: [text(exceeded.body), exceeded.deadLetterReason] });

  // Properties to modify, on the link (abandon, defer, dead-letter) and on $management (a deferred message)
  await sender.sendMessages({ body: "modified", applicationProperties: { kept: "yes" } });
  await receiver.abandonMessage(await receiveOne(receiver), { attempt: 1 });
  const again = await receiveOne(receiver);
  await receiver.deferMessage(again, { deferredBy: "js" });
  const [held] = await receiver.receiveDeferredMessages(again.sequenceNumber);
  await receiver.abandonMessage(held, { viaManagement: true });
  const [back] = await receiver.receiveDeferredMessages(again.sequenceNumber);
  await receiver.deadLetterMessage(back, { deadLetterReason: "done", why: "checked" });
  const modified = await receiveOne(dlq);
  await dlq.completeMessage(modified);
  result({
    modified: {
      afterAbandon: again.applicationProperties,
      afterDefer: held.applicationProperties,
      afterManagement: back.applicationProperties,
      deadLettered: [modified.applicationProperties, modified.deadLetterReason],
    },
  });
  await sb.close();
});
