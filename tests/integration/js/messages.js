// Send (one message, an array, a batch), peek from a fresh client, receive (batch, subscribe, iterator).
"use strict";
const { client, result, run, text } = require("./common");

function summary(m) {
  return {
    body: text(m.body),
    messageId: m.messageId === undefined ? null : String(m.messageId),
    subject: m.subject,
    contentType: m.contentType,
    correlationId: m.correlationId,
    applicationProperties: m.applicationProperties,
    sequenceNumber: m.sequenceNumber === undefined ? null : Number(m.sequenceNumber),
  };
}

function streamed(receiver, count) {
  return new Promise((resolve, reject) => {
    const got = [];
    const subscription = receiver.subscribe(
      {
        processMessage: async (m) => {
          await receiver.completeMessage(m);
          got.push(text(m.body));
          if (got.length === count) subscription.close().then(() => resolve(got), reject);
        },
        processError: async (args) => reject(args.error),
      },
      { autoCompleteMessages: false },
    );
  });
}

run(async () => {
  const queue = process.env.QUEUE;
  const sb = client();
  const sender = sb.createSender(queue);
  await sender.sendMessages({
    body: "single",
    subject: "subject-1",
    contentType: "text/plain",
    correlationId: "corr-1",
    applicationProperties: { count: 7, ratio: 1.5, name: "seven", flag: true },
  });
  await sender.sendMessages([{ body: "array-1" }, { body: "array-2", messageId: "given-id" }]);
  const batch = await sender.createMessageBatch();
  for (const body of ["batch-1", "batch-2"]) {
    if (!batch.tryAddMessage({ body })) throw new Error("the batch is full");
  }
  await sender.sendMessages(batch);
  result({ sent: 5 });

  // A client whose only token is the one the SDK puts for "<queue>/$management".
  const peeker = client();
  const peeked = await peeker.createReceiver(queue).peekMessages(10);
  await peeker.close();
  result({ peeked: peeked.map(summary) });

  const receiver = sb.createReceiver(queue);
  const received = await receiver.receiveMessages(3, { maxWaitTimeInMs: 10000 });
  for (const m of received) await receiver.completeMessage(m);
  result({ received: received.map(summary) });

  result({ streamed: await streamed(receiver, 2) });
  await receiver.close();

  await sender.sendMessages({ body: "iterated" });
  const iterating = sb.createReceiver(queue, { receiveMode: "receiveAndDelete" });
  for await (const m of iterating.getMessageIterator()) {
    result({ iterated: summary(m) });
    break;
  }
  await sb.close();
});
