// Rules of a subscription through the rule manager: replace the default rule, filter, list, delete.
"use strict";
const { client, result, run, text } = require("./common");

run(async () => {
  const { TOPIC: topic, SUBSCRIPTION: subscription } = process.env;
  const sb = client();
  const rules = sb.createRuleManager(topic, subscription);
  await rules.deleteRule("$Default");
  await rules.createRule("red", { sqlExpression: "color = 'red'" });
  await rules.createRule("invoices", { correlationId: "invoice", applicationProperties: { region: "eu" } });
  await rules.createRule("tagged", { sqlExpression: "color = 'green'" }, { sqlExpression: "SET tag = 'seen'" });
  const listed = [];
  for await (const rule of rules.listRules()) listed.push(rule.name);

  await sb.createSender(topic).sendMessages([
    { body: "red", applicationProperties: { color: "red" } },
    { body: "blue", applicationProperties: { color: "blue" } },
    { body: "invoice-eu", correlationId: "invoice", applicationProperties: { region: "eu" } },
    { body: "invoice-us", correlationId: "invoice", applicationProperties: { region: "us" } },
    { body: "green", applicationProperties: { color: "green" } },
  ]);
  const receiver = sb.createReceiver(topic, subscription, { receiveMode: "receiveAndDelete" });
  const got = [];
  for (;;) {
    const batch = await receiver.receiveMessages(10, { maxWaitTimeInMs: 1500 });
    if (batch.length === 0) break;
    for (const m of batch) got.push({ body: text(m.body), tag: (m.applicationProperties || {}).tag || null });
  }
  await rules.deleteRule("invoices");
  const after = [];
  for await (const rule of rules.listRules()) after.push(rule.name);
  result({ listed, received: got, after });
  await sb.close();
});
