// The administration client (ServiceBusAdministrationClient) through every kind of call, in one process.
//
// Each section runs on its own and reports "RESULT {section: {...}}" or "RESULT {section: {error}}", so
// one refusal does not hide what the others would have shown. Before this runs, the test has made the
// queue "js-counted" holding 3 active messages and 1 scheduled one.

"use strict";

const { adminClient, result, run } = require("./common");

const admin = adminClient();

async function section(name, body) {
  try {
    result({ [name]: await body() });
  } catch (err) {
    result({ [name]: { error: `${err.statusCode || ""} ${err.code || ""} ${err.message}`.slice(0, 500) } });
  }
}

async function failure(call) {
  try {
    await call();
    return "no error";
  } catch (err) {
    return err.statusCode;
  }
}

async function all(iterator) {
  const out = [];
  for await (const item of iterator) out.push(item);
  return out;
}

async function pages(iterator, size) {
  const out = [];
  for await (const page of iterator.byPage({ maxPageSize: size })) out.push(page.map((e) => e.name));
  return out;
}

function queueView(q) {
  return {
    name: q.name,
    lockDuration: q.lockDuration,
    maxDeliveryCount: q.maxDeliveryCount,
    enableExpress: q.enableExpress,
    userMetadata: q.userMetadata,
    defaultMessageTimeToLive: q.defaultMessageTimeToLive,
    status: q.status,
  };
}

function ruleView(r) {
  return { name: r.name, filter: r.filter, action: r.action };
}

async function queues() {
  const created = await admin.createQueue("js-q", {
    lockDuration: "PT45S",
    maxDeliveryCount: 7,
    enableExpress: true,
    userMetadata: "meta",
    defaultMessageTimeToLive: "PT1H",
  });
  const fetched = await admin.getQueue("js-q");
  fetched.maxDeliveryCount = 9;
  fetched.lockDuration = "PT50S";
  const updated = await admin.updateQueue(fetched);
  const duplicate = await failure(() => admin.createQueue("js-q"));
  const existed = await admin.queueExists("js-q");
  await admin.deleteQueue("js-q");
  return {
    created: queueView(created),
    fetched: queueView(await admin.getQueue("js-counted")),
    updated: queueView(updated),
    duplicate,
    existed,
    existsAfterDelete: await admin.queueExists("js-q"),
    missing: await failure(() => admin.getQueue("js-q")),
    runtime: await admin.getQueueRuntimeProperties("js-counted"),
  };
}

async function topics() {
  const created = await admin.createTopic("js-t", { maxSizeInMegabytes: 2048, enableExpress: false });
  const gone = await admin.createTopic("js-t-gone");
  gone.userMetadata = "about to go";
  const updated = await admin.updateTopic(gone);
  await admin.deleteTopic("js-t-gone");
  return {
    created: { name: created.name, maxSizeInMegabytes: created.maxSizeInMegabytes, express: created.enableExpress },
    updated: { name: updated.name, userMetadata: updated.userMetadata },
    existsAfterDelete: await admin.topicExists("js-t-gone"),
  };
}

async function subscriptions() {
  await admin.createSubscription("js-t", "plain");
  const red = await admin.createSubscription("js-t", "only-red", {
    defaultRuleOptions: { name: "red", filter: { correlationId: "red", applicationProperties: { shade: 1 } } },
  });
  await admin.createSubscription("js-t", "only-blue", {
    maxDeliveryCount: 4,
    defaultRuleOptions: { name: "$Default", filter: { sqlExpression: "color = 'blue'" } },
  });
  const fetched = await admin.getSubscription("js-t", "only-blue");
  fetched.maxDeliveryCount = 6;
  const updated = await admin.updateSubscription(fetched);
  const runtime = await admin.getSubscriptionRuntimeProperties("js-t", "plain");
  return {
    created: { topicName: red.topicName, subscriptionName: red.subscriptionName, status: red.status },
    updatedMaxDeliveryCount: updated.maxDeliveryCount,
    runtime: { subscriptionName: runtime.subscriptionName, totalMessageCount: runtime.totalMessageCount },
    exists: await admin.subscriptionExists("js-t", "only-red"),
    topicRuntime: await admin.getTopicRuntimeProperties("js-t"),
    rules: {
      plain: (await all(admin.listRules("js-t", "plain"))).map(ruleView),
      "only-red": (await all(admin.listRules("js-t", "only-red"))).map(ruleView),
      "only-blue": (await all(admin.listRules("js-t", "only-blue"))).map(ruleView),
    },
  };
}

async function rules() {
  await admin.createSubscription("js-t", "ruled");
  const created = await admin.createRule(
    "js-t",
    "ruled",
    "big",
    { sqlExpression: "n > @min", sqlParameters: { "@min": 3 } },
    { sqlExpression: "SET flagged = 1" },
  );
  const fetched = await admin.getRule("js-t", "ruled", "big");
  fetched.filter = { subject: "hello", applicationProperties: { tier: "gold" } };
  const updated = await admin.updateRule("js-t", "ruled", fetched);
  const existed = await admin.ruleExists("js-t", "ruled", "big");
  await admin.deleteRule("js-t", "ruled", "big");
  await admin.deleteSubscription("js-t", "ruled");
  return {
    created: ruleView(created),
    updated: ruleView(updated),
    existed,
    subscriptionGone: !(await admin.subscriptionExists("js-t", "ruled")),
  };
}

async function listing() {
  for (let i = 0; i < 5; i++) await admin.createQueue(`js-page-${i}`);
  return {
    queuePages: await pages(admin.listQueues(), 2),
    queueRuntime: (await all(admin.listQueuesRuntimeProperties())).map((q) => [q.name, q.activeMessageCount]),
    topics: (await all(admin.listTopics())).map((t) => t.name),
    topicRuntime: (await all(admin.listTopicsRuntimeProperties())).map((t) => [t.name, t.subscriptionCount]),
    subscriptionPages: (await pages(admin.listSubscriptions("js-t"), 2)).map((p) => p.length),
    subscriptionRuntime: (await all(admin.listSubscriptionsRuntimeProperties("js-t"))).map((s) => s.subscriptionName),
  };
}

run(async () => {
  await section("namespace", async () => {
    const ns = await admin.getNamespaceProperties();
    return { name: ns.name, messagingSku: ns.messagingSku };
  });
  await section("queues", queues);
  await section("topics", topics);
  await section("subscriptions", subscriptions);
  await section("rules", rules);
  await section("listing", listing);
});
