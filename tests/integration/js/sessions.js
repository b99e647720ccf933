// Sessions: a named session with its state, then round robin over the next available sessions.
"use strict";
const { client, result, run, text } = require("./common");

async function drain(receiver) {
  const got = [];
  for (;;) {
    const batch = await receiver.receiveMessages(10, { maxWaitTimeInMs: 500 });
    if (batch.length === 0) return got;
    for (const m of batch) {
      await receiver.completeMessage(m);
      got.push(text(m.body));
    }
  }
}

run(async () => {
  const queue = process.env.QUEUE;
  const sb = client();
  const sender = sb.createSender(queue);
  const messages = [];
  for (const session of ["red", "green", "blue"]) {
    for (const n of [1, 2]) messages.push({ body: `${session}-${n}`, sessionId: session });
  }
  await sender.sendMessages(messages);

  const red = await sb.acceptSession(queue, "red");
  await red.setSessionState("red state");
  const redMessages = await drain(red);
  await red.close();
  const again = await sb.acceptSession(queue, "red");
  const state = await again.getSessionState();
  await again.close();
  result({ sessionId: red.sessionId, redMessages, state: text(state) });

  const roundRobin = [];
  for (let i = 0; i < 2; i++) {
    const next = await sb.acceptNextSession(queue, { maxAutoLockRenewalDurationInMs: 0 });
    roundRobin.push({ sessionId: next.sessionId, messages: await drain(next) });
    await next.close();
  }
  result({ roundRobin });
  await sb.close();
});
