"""The Service Bus REST door driven by REST clients that exist, unmodified: Node's ``azure-sb`` 0.11.2,
Python's ``azure-servicebus`` 0.21.1 (``ServiceBusService``) and curl with the examples of Microsoft's REST
reference. Each client gets only the bridge's endpoint (and trusts its self-signed certificate, as
``bridge up --tls`` writes it); the door speaks HTTPS as they require.

What the door stored is delivered the way the send workers deliver it (``to_message`` of each outbox
envelope, sent with the SDK to a local namespace) and read back with the raw azure-servicebus 7 SDK, where
every field of every message is compared with what the client sent: body bytes, ids, TTL, schedule, label,
reply-to, reply-to session, to, content type, via partition key, and each property's name, type and value.
The clients are installed once per machine (``tests/integration/rest_clients.py``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import httpx
import pytest
import redis
from azure.servicebus import ServiceBusClient, ServiceBusReceivedMessage

from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.ports import free_port, wait_listening
from bridge.embedded.redis_server import RedisServer
from bridge.emulator.certs import ensure_certificate
from bridge.outbox.reader import OutboxReader
from bridge.servicebus.messages import to_message
from bridge.settings import Settings
from tests.integration import rest_clients
from tests.integration.ingress_support import read_all, running_ingress
from tests.integration.servicebus_support import drain

SAS_NAME, SAS_KEY = "RootManageSharedAccessKey", "cmVzdC1jbGllbnRzLWtleQ=="
CLIENT_TIMEOUT = 300  # seconds a client process may take (the first run installs nothing here: set-up does)


@dataclass
class Door:
    """The running door: its HTTPS URL, settings, certificate and the namespace deliveries go to."""

    url: str
    settings: Settings
    certificate: Path
    namespace: LocalNamespace

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def door(
    redis_server: RedisServer, shared_namespace: LocalNamespace, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Door]:
    assert redis_server.port != 6379
    if not redis_server.running:
        redis_server.start()
    redis.Redis(port=redis_server.port).flushall()
    tls = ensure_certificate(tmp_path_factory.mktemp("ingress-tls"), "127.0.0.1")
    settings = Settings(
        redis_url=redis_server.url,
        ingress={
            "sas_key_name": SAS_NAME,
            "sas_key": SAS_KEY,
            "tls_certificate": str(tls.cert),
            "tls_key": str(tls.key),
        },
    )
    with running_ingress(settings, require_auth=True) as url:
        yield Door(url, settings, tls.cert, shared_namespace)


def delivered(door: Door, entity: str, expected: int) -> list[ServiceBusReceivedMessage]:
    """Deliver what the door stored for ``entity`` as a send worker does; receive it with the raw SDK."""
    client = redis.Redis.from_url(door.settings.redis_url.get_secret_value())
    try:
        reader = OutboxReader(client, door.settings)
        reader.ensure_groups(entity)
        entries = read_all(reader, entity, "rest-clients", count=1000)
    finally:
        client.close()
    assert len(entries) == expected, [entry.fields for entry in entries]
    envelopes = [entry.envelope for entry in entries]
    assert all(envelope is not None for envelope in envelopes)
    with (
        ServiceBusClient.from_connection_string(door.namespace.connection_string, retry_total=1) as sb,
        sb.get_queue_sender(entity) as sender,
    ):
        sender.send_messages([to_message(envelope) for envelope in envelopes if envelope is not None])
    got = drain(door.namespace, entity, expected)
    assert len(got) == expected
    return got


class AssignedId:
    """Matches a MessageId the bridge assigned (32 hex digits)."""

    __hash__ = None  # type: ignore[assignment]  # compared, never hashed

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and re.fullmatch("[0-9a-f]{32}", other) is not None

    def __repr__(self) -> str:
        return "<assigned id>"


def _text(value: object) -> object:
    return value.decode() if isinstance(value, bytes) else value


def fields_of(message: ServiceBusReceivedMessage) -> dict[str, Any]:
    """Every field a receiver sees, properties with their Python types (``str`` for AMQP strings)."""
    props = {_text(name): _text(value) for name, value in (message.application_properties or {}).items()}
    annotations = message.raw_amqp_message.annotations or {}
    return {
        "body": b"".join(message.body),
        "message_id": message.message_id,
        "session_id": message.session_id,
        "partition_key": message.partition_key,
        "via_partition_key": _text(annotations.get(b"x-opt-via-partition-key")),
        "time_to_live": message.time_to_live,
        "scheduled_enqueue_time_utc": message.scheduled_enqueue_time_utc,
        "subject": message.subject,
        "reply_to": message.reply_to,
        "reply_to_session_id": message.reply_to_session_id,
        "to": message.to,
        "content_type": message.content_type,
        "correlation_id": message.correlation_id,
        "properties": props,
        "property_types": {name: type(value).__name__ for name, value in props.items()},
    }


def expected(body: bytes, **fields: Any) -> dict[str, Any]:
    """The fields a message sent with ``fields`` must arrive with (every other field absent)."""
    props = fields.pop("properties", {})
    out: dict[str, Any] = {
        "body": body,
        "message_id": AssignedId(),
        "session_id": None,
        "partition_key": None,
        "via_partition_key": None,
        "time_to_live": None,
        "scheduled_enqueue_time_utc": None,
        "subject": None,
        "reply_to": None,
        "reply_to_session_id": None,
        "to": None,
        "content_type": None,
        "correlation_id": None,
        "properties": props,
        "property_types": {name: type(value).__name__ for name, value in props.items()},
    }
    assert set(fields) <= set(out), set(fields) - set(out)
    out.update(fields)
    return out


def past_schedule() -> datetime:
    """A schedule an hour ago, to the second (RFC 1123's precision): enqueued at once, and kept. Carried on
    messages without a TTL: the local namespace counts a TTL from the schedule, so it would expire them."""
    return (datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0)


def dotnet_sas_token(resource: str, expiry: int | None = None) -> str:
    """A token made as the PowerShell recipe makes it: ``HttpUtility.UrlEncode`` writes lower-case escapes."""

    def url_encode(text: str) -> str:
        return re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote_plus(text))

    expiry = expiry or int(time.time()) + 3600
    target = url_encode(resource)
    digest = hmac.new(SAS_KEY.encode(), f"{target}\n{expiry}".encode(), hashlib.sha256).digest()
    signature = url_encode(base64.b64encode(digest).decode())
    return f"SharedAccessSignature sr={target}&sig={signature}&se={expiry}&skn={SAS_NAME}"


# --- Node's azure-sb 0.11.2 -------------------------------------------------------------------------------

NODE_SCRIPT = """
const azure = require('azure-sb');
const sb = azure.createServiceBusService(process.env.CONNECTION_STRING);
const queue = process.env.QUEUE;
const messages = JSON.parse(process.env.MESSAGES);
function next(i) {
  if (i === messages.length) { console.log('sent ' + i); return; }
  sb.sendQueueMessage(queue, messages[i], (error, result, response) => {
    if (error) {
      console.error('send ' + i + ' failed: ' + error + ' ' + (response && response.body));
      process.exit(1);
    }
    next(i + 1);
  });
}
next(0);
"""


def test_node_azure_sb_sends_through_the_door_unmodified(door: Door, tmp_path: Path) -> None:
    node, modules = rest_clients.node_azure_sb()
    schedule = past_schedule()
    messages = [
        {
            "body": "node one",
            "contentType": "application/json",
            "brokerProperties": {
                "MessageId": "node-1",
                "Label": "label",
                "CorrelationId": "corr",
                "ReplyTo": "replies",
                "ReplyToSessionId": "reply-session",
                "To": "someone",
                "SessionId": "s-1",
                "PartitionKey": "s-1",
                "TimeToLive": 90.5,
            },
            "customProperties": {
                "Priority": "High",
                "Count": 42,
                "Ratio": 1.5,
                "Flag": True,
                "Big": 2**53 - 1,
            },
        },
        {
            "body": "node two",
            "brokerProperties": {
                "MessageId": "node-2",
                "ScheduledEnqueueTimeUtc": format_datetime(schedule, usegmt=True),
            },
        },
    ]
    # Given only the connection string pointed at the bridge and the bridge's certificate trusted (azure-sb's
    # URI check wants a dotted host name or an address: "localhost" is refused by the client itself)
    connection = (
        f"Endpoint=sb://127.0.0.1:{door.port}/;SharedAccessKeyName={SAS_NAME};SharedAccessKey={SAS_KEY}"
    )
    script = tmp_path / "send.js"
    script.write_text(NODE_SCRIPT)
    # When azure-sb sends (POST /<queue>/Messages?api-version=2016-07, lower-case-escaped SAS over that URI)
    done = subprocess.run(
        [node, str(script)],
        env={
            "PATH": "/usr/bin:/bin",
            "NODE_PATH": str(modules),
            "NODE_EXTRA_CA_CERTS": str(door.certificate),
            "CONNECTION_STRING": connection,
            "QUEUE": "node-orders",
            "MESSAGES": json.dumps(messages),
        },
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    # Then every field arrives as the client sent it
    got = [fields_of(message) for message in delivered(door, "node-orders", 2)]
    assert got == [
        expected(
            b"node one",
            message_id="node-1",
            content_type="application/json",
            subject="label",
            correlation_id="corr",
            reply_to="replies",
            reply_to_session_id="reply-session",
            to="someone",
            session_id="s-1",
            partition_key="s-1",
            time_to_live=timedelta(seconds=90.5),
            properties={"Priority": "High", "Count": 42, "Ratio": 1.5, "Flag": True, "Big": 2**53 - 1},
        ),
        expected(
            b"node two",
            message_id="node-2",
            scheduled_enqueue_time_utc=schedule,
            content_type="text/plain",  # azure-sb's Content-Type when the message names none
        ),
    ]


# --- Python's azure-servicebus 0.21.1 ----------------------------------------------------------------------

PYTHON_SCRIPT = """
import datetime, json, os, sys
from azure.servicebus import Message, ServiceBusService

service = ServiceBusService(
    service_namespace="localhost",
    host_base=":" + os.environ["PORT"],
    shared_access_key_name=os.environ["KEY_NAME"],
    shared_access_key_value=os.environ["KEY"],
)
schedule = datetime.datetime.fromisoformat(os.environ["SCHEDULE"])
service.send_queue_message("py-orders", Message(
    b"py one",
    type="text/plain",
    custom_properties={"Priority": "High", "Count": 42, "Ratio": 1.5, "Flag": True},
    broker_properties={
        "MessageId": "py-1", "Label": "label", "TimeToLive": 1800, "CorrelationId": "corr",
        "ReplyTo": "replies", "ReplyToSessionId": "reply-session", "To": "someone", "SessionId": "s-1",
    },
))
service.send_queue_message_batch("py-orders", [
    Message("py two", custom_properties={"Count": 7, "Name": "x"},
            broker_properties={"MessageId": "py-2", "TimeToLive": 60}),
    Message("py three", broker_properties={"MessageId": "py-3", "ScheduledEnqueueTimeUtc": schedule}),
])
print("sent")
"""


def test_python_azure_servicebus_0_21_sends_through_the_door_unmodified(door: Door, tmp_path: Path) -> None:
    python = rest_clients.python_0x()
    schedule = past_schedule()
    script = tmp_path / "send.py"
    script.write_text(PYTHON_SCRIPT)
    # Given only the endpoint (host_base) changed and the certificate trusted (requests reads the bundle)
    done = subprocess.run(
        [str(python), str(script)],
        env={
            "PATH": "/usr/bin:/bin",
            "REQUESTS_CA_BUNDLE": str(door.certificate),
            "PORT": str(door.port),
            "KEY_NAME": SAS_NAME,
            "KEY": SAS_KEY,
            "SCHEDULE": schedule.replace(tzinfo=None).isoformat(),
        },
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    got = [fields_of(message) for message in delivered(door, "py-orders", 3)]
    # Then: TimeToLive sent as the text "1800" is 1800 s; custom header values are typed as the REST API
    # types them; batch UserProperties keep their JSON types (this SDK writes every value as a JSON string)
    assert got == [
        expected(
            b"py one",
            message_id="py-1",
            content_type="text/plain",
            subject="label",
            correlation_id="corr",
            reply_to="replies",
            reply_to_session_id="reply-session",
            to="someone",
            session_id="s-1",
            time_to_live=timedelta(seconds=1800),
            properties={"Priority": "High", "Count": 42, "Ratio": 1.5, "Flag": True},
        ),
        expected(
            b"py two",
            message_id="py-2",
            time_to_live=timedelta(seconds=60),
            properties={"Count": "7", "Name": "x"},
        ),
        expected(b"py three", message_id="py-3", scheduled_enqueue_time_utc=schedule),
    ]


# --- curl with the reference's examples -----------------------------------------------------------------


def curl(door: Door, path: str, headers: list[str], body: bytes) -> tuple[int, dict[str, str], bytes]:
    """POST ``body`` with curl over HTTPS (trusting the door's certificate); status, headers, body."""
    if shutil.which("curl") is None:
        pytest.skip(
            "curl is not installed: the reference-example tests send with it (scripts/bootstrap installs it)"
        )
    args = ["curl", "-sS", "--cacert", str(door.certificate), "-X", "POST", "-D", "-", "--data-binary", "@-"]
    for header in headers:
        args += ["-H", header]
    done = subprocess.run(
        [*args, f"https://localhost:{door.port}{path}"],
        input=body,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    head, _, rest = done.stdout.partition(b"\r\n\r\n")
    if head.startswith(b"HTTP/1.1 100"):
        head, _, rest = rest.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    answer = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, answer, rest


def test_reference_send_message_example_verbatim(door: Door) -> None:
    # Microsoft's "Send Message" example, headers and body as printed (the SAS token is ours, made the
    # .NET/PowerShell way with lower-case escapes; Content-Length is curl's: the printed one is wrong)
    token = dotnet_sas_token(f"https://localhost:{door.port}/HttpClientSampleQueue")
    status, headers, body = curl(
        door,
        "/HttpClientSampleQueue/messages?timeout=60",
        [
            f"Authorization: {token}",
            'BrokerProperties: {"Label":"M1","State":"Active","TimeToLive":10}',
            "Priority: High",
            "Customer: 12345,ABC",
            "Content-Type: application/atom+xml;type=entry;charset=utf-8",
            "Host: your-namespace.servicebus.windows.net",
            "Expect: 100-continue",
            "Accept-Charset: utf-8",
        ],
        b"This is a message.",
    )
    assert status == 201, body
    assert headers["x-bridge-ignored-properties"] == "State"
    (got,) = [fields_of(message) for message in delivered(door, "HttpClientSampleQueue", 1)]
    assert got == expected(
        b"This is a message.",
        subject="M1",
        time_to_live=timedelta(seconds=10),
        content_type="application/atom+xml;type=entry;charset=utf-8",
        properties={"Priority": "High", "Customer": "12345,ABC"},
    )


REFERENCE_BATCH = (
    b'[{"Body":"This is the first message",'
    b'"BrokerProperties":{"Label":"M1","TimeToLiveTimeSpan":"0.00:00:40"}},'
    b'{"Body":"This is the second message",'
    b'"BrokerProperties":{"Label":"M2"},"UserProperties":{"Priority":"Low"}},'
    b'{"Body":"This is the third message","BrokerProperties":{"Label":"M3"},'
    b'"UserProperties":{"Priority":"Medium","Customer":"ABC"}}]'
)


def test_reference_send_message_batch_example_and_every_batch_property(door: Door) -> None:
    token = dotnet_sas_token(f"https://localhost:{door.port}/HttpClientSampleQueue-batch?api-version=2015-01")
    batch_type = ["Content-Type: application/vnd.microsoft.servicebus.json", f"Authorization: {token}"]
    status, _, body = curl(
        door, "/HttpClientSampleQueue-batch/Messages?timeout=60", batch_type, REFERENCE_BATCH
    )
    assert status == 201, body
    schedule = past_schedule()
    more = [
        {
            "Body": base64.b64encode(b"\x00\x01binary\xff").decode(),
            "BrokerProperties": {
                "IsBodyBase64": True,
                "MessageId": "b-1",
                "ReplyToSessionId": "reply-session",
                "ViaPartitionKey": "via",
                "PartitionKey": "pk",
                "TimeToLive": 90.5,
                "SequenceNumber": 12,
                "\u4e2d": 1,  # an unknown name a header cannot carry as is
            },
            "UserProperties": {"s": "12345", "t": "true", "q": '"x"', "n": 5, "f": 2.5, "b": False},
        },
        {
            "Body": "later",
            "BrokerProperties": {"ScheduledEnqueueTimeUtc": format_datetime(schedule, usegmt=True)},
        },
    ]
    status, headers, body = curl(
        door, "/HttpClientSampleQueue-batch/messages", batch_type, json.dumps(more).encode()
    )
    assert status == 201, body
    assert headers["x-bridge-ignored-properties"] == "SequenceNumber, %E4%B8%AD"
    got = [fields_of(message) for message in delivered(door, "HttpClientSampleQueue-batch", 5)]
    assert got == [
        expected(b"This is the first message", subject="M1", time_to_live=timedelta(seconds=40)),
        expected(b"This is the second message", subject="M2", properties={"Priority": "Low"}),
        expected(
            b"This is the third message", subject="M3", properties={"Priority": "Medium", "Customer": "ABC"}
        ),
        expected(
            b"\x00\x01binary\xff",
            message_id="b-1",
            reply_to_session_id="reply-session",
            via_partition_key="via",
            partition_key="pk",
            time_to_live=timedelta(seconds=90.5),
            properties={"s": "12345", "t": "true", "q": '"x"', "n": 5, "f": 2.5, "b": False},
        ),
        expected(b"later", scheduled_enqueue_time_utc=schedule),
    ]


def test_refusals_follow_the_reference_and_store_nothing(door: Door) -> None:
    token = dotnet_sas_token(f"https://localhost:{door.port}/")
    auth = [f"Authorization: {token}"]
    # a newline in the entity is an invalid name, not an unknown path
    status, _, body = curl(door, "/bad%0Aname/messages", auth, b"x")
    assert (status, json.loads(body)["error"]["code"]) == (400, "entity_name_invalid")
    # too large: 403, "Quota exceeded or message too large"
    status, _, body = curl(door, "/big-one/messages", auth, b"x" * (256 * 1024 + 1))
    assert (status, json.loads(body)["error"]["code"]) == (403, "body_too_large")
    # a token signed for another key
    forged = token.replace("sig=", "sig=x")
    status, _, body = curl(door, "/big-one/messages", [f"Authorization: {forged}"], b"x")
    assert status == 401
    client = redis.Redis.from_url(door.settings.redis_url.get_secret_value())
    try:
        assert not [key for key in client.keys("*") if b"big-one" in key or b"bad" in key]
    finally:
        client.close()


def test_keep_alive_carries_several_sends_on_one_connection(door: Door) -> None:
    token = dotnet_sas_token(f"https://localhost:{door.port}/keepalive")
    seen: set[tuple[str, int]] = set()

    def remember(response: httpx.Response) -> None:
        stream = response.extensions["network_stream"]
        seen.add(stream.get_extra_info("client_addr"))

    trust = ssl.create_default_context(cafile=str(door.certificate))
    with httpx.Client(verify=trust, event_hooks={"response": [remember]}) as client:
        for n in range(3):
            answer = client.post(
                f"https://localhost:{door.port}/keepalive/messages",
                content=f"m{n}".encode(),
                headers={"Authorization": token, "BrokerProperties": json.dumps({"MessageId": f"k{n}"})},
            )
            assert answer.status_code == 201, answer.text
    assert len(seen) == 1
    assert [fields_of(m)["message_id"] for m in delivered(door, "keepalive", 3)] == ["k0", "k1", "k2"]


def test_bridge_serve_speaks_https_with_the_configured_pair(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # Given the certificate settings, as `bridge up --tls` writes them into its env file
    tls = ensure_certificate(tmp_path / "tls", "127.0.0.1")
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")},
        "BRIDGE_REDIS_URL": redis_server.url,
        "BRIDGE_INGRESS__TLS_CERTIFICATE": str(tls.cert),
        "BRIDGE_INGRESS__TLS_KEY": str(tls.key),
    }
    log = (tmp_path / "serve.log").open("wb")
    serve = subprocess.Popen(
        [sys.executable, "-m", "bridge.cli.main", "serve", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=log,
    )
    try:
        assert wait_listening("127.0.0.1", port, 30), (tmp_path / "serve.log").read_text()
        trust = ssl.create_default_context(cafile=str(tls.cert))
        # When a client that trusts it connects over HTTPS, and one tries plain HTTP
        assert httpx.get(f"https://localhost:{port}/healthz", verify=trust, timeout=10).status_code == 200
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    finally:
        serve.terminate()
        serve.wait(10)
        log.close()
