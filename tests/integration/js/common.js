// What every conformance script shares: the client its environment asks for, and how it reports.
//
// Environment (set by tests/integration/js_sdk_support.py's run_js and the test):
//   SB_CONNECTION_STRING  a connection string (SAS), or
//   SB_FQDN               host[:port] signed in to with a ClientSecretCredential of the local token issuer
//                         (AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET, AZURE_AUTHORITY_HOST),
//                         or with DefaultAzureCredential when SB_CREDENTIAL=default (the SDK's samples);
//   SB_WEBSOCKETS=1       AMQP over WebSockets (the "ws" package), through HTTPS_PROXY when it is set;
//   NODE_EXTRA_CA_CERTS   the local namespace's certificate, for AMQPS and WebSockets.
// A script prints its observations as "RESULT {json}" lines; the Python test asserts on them.

"use strict";

const { ServiceBusClient, ServiceBusAdministrationClient } = require("@azure/service-bus");

function result(values) {
  console.log("RESULT " + JSON.stringify(values));
}

function credential() {
  const { ClientSecretCredential, DefaultAzureCredential } = require("@azure/identity");
  if (process.env.SB_CREDENTIAL === "default") return new DefaultAzureCredential();
  return new ClientSecretCredential(
    process.env.AZURE_TENANT_ID,
    process.env.AZURE_CLIENT_ID,
    process.env.AZURE_CLIENT_SECRET,
    { authorityHost: process.env.AZURE_AUTHORITY_HOST, disableInstanceDiscovery: true },
  );
}

function clientOptions() {
  const options = { retryOptions: { maxRetries: 1, timeoutInMs: 20000 } };
  if (process.env.SB_WEBSOCKETS === "1") {
    const webSocketOptions = { webSocket: require("ws") };
    const proxy = process.env.HTTPS_PROXY;
    if (proxy) {
      const { HttpsProxyAgent } = require("https-proxy-agent");
      webSocketOptions.webSocketConstructorOptions = { agent: new HttpsProxyAgent(proxy) };
    }
    options.webSocketOptions = webSocketOptions;
  }
  return options;
}

function client() {
  if (process.env.SB_CONNECTION_STRING) {
    return new ServiceBusClient(process.env.SB_CONNECTION_STRING, clientOptions());
  }
  return new ServiceBusClient(process.env.SB_FQDN, credential(), clientOptions());
}

function adminClient() {
  if (process.env.SB_CONNECTION_STRING) {
    return new ServiceBusAdministrationClient(process.env.SB_CONNECTION_STRING);
  }
  return new ServiceBusAdministrationClient(process.env.SB_FQDN, credential());
}

function text(body) {
  return Buffer.isBuffer(body) ? body.toString() : body;
}

// Run the script's main; any error fails the script with its stack on stderr.
function run(main) {
  main().then(
    () => process.exit(0),
    (err) => {
      console.error(err && err.stack ? err.stack : err);
      for (const inner of (err && err.errors) || []) console.error(inner.stack || inner);
      process.exit(1);
    },
  );
}

module.exports = { adminClient, client, credential, result, run, text };
