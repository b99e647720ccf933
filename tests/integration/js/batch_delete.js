// deleteMessages and purgeMessages (@azure/service-bus 7.10 beta): com.microsoft:batch-delete-messages.
"use strict";
const Long = require("long");
const { client, result, run, text } = require("./common");

run(async () => {
  const queue = process.env.QUEUE;
  const sb = client();
  // A peek goes on from the last peeked message unless told where to start.
  const look = async () =>
    (await receiver.peekMessages(10, { fromSequenceNumber: Long.ZERO })).map((m) => text(m.body));
  const sender = sb.createSender(queue);
  const receiver = sb.createReceiver(queue);
  await sender.sendMessages(["one", "two", "three", "four", "five"].map((body) => ({ body })));
  const [locked] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10000 });
  const deleted = await receiver.deleteMessages({ maxMessageCount: 2 });
  const left = await look();
  const purged = await receiver.purgeMessages();
  const afterPurge = await look();
  await receiver.completeMessage(locked);
  const cutoff = new Date(Date.now() - 3600 * 1000);
  await sender.sendMessages({ body: "new" });
  const olderThanAnHour = await receiver.deleteMessages({ maxMessageCount: 10, beforeEnqueueTime: cutoff });
  result({ locked: text(locked.body), deleted, left, purged, afterPurge, olderThanAnHour });
  await sb.close();
});
