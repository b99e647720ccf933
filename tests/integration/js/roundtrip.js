// One message there and back, and a peek, over whatever transport and credential the environment names.
"use strict";
const { client, result, run, text } = require("./common");

run(async () => {
  const queue = process.env.QUEUE;
  const sb = client();
  await sb.createSender(queue).sendMessages({ body: "round trip" });
  const receiver = sb.createReceiver(queue);
  const peeked = await receiver.peekMessages(1);
  const [m] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 10000 });
  await receiver.completeMessage(m);
  result({ peeked: peeked.map((p) => text(p.body)), received: text(m.body), messageId: m.messageId });
  await sb.close();
});
