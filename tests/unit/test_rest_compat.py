"""The Service Bus REST door's compatibility rules, pure: SAS tokens as each real client makes them, broker
properties as Microsoft's reference lists them, batch items, TimeSpan text, headers that are never
properties."""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import quote, quote_plus

import pytest

from bridge.core.auth import authenticate_sas, resource_path, sas_candidates, within_scope
from bridge.core.door_formats import redis_door_message, rest_batch, rest_message, timespan_seconds
from bridge.errors import AuthenticationError, InvalidMessageError
from bridge.http.rest_door import ignored_names, is_http_priority

KEY = "k3y+/="
EXPIRY = 2_000_000_000


def signed(text: str, key: str = KEY) -> str:
    """The base64 HMAC-SHA256 of ``<text>\\n<expiry>``, as every client computes it."""
    digest = hmac.new(key.encode(), f"{text}\n{EXPIRY}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def node_azure_sb(uri: str) -> str:
    # azure-sb 0.11.2 (lib/internal/sharedaccesssignature.js): encodeURIComponent(uri.toLowerCase())
    # .toLowerCase() is both signed and sent; sig is encodeURIComponent(base64); fields in this order.
    target = quote(uri.lower(), safe="-_.!~*'()").lower()
    return f"SharedAccessSignature sig={quote(signed(target), safe='')}&se={EXPIRY}&skn=root&sr={target}"


def python_0x(uri: str) -> str:
    # azure-servicebus 0.21.1 (ServiceBusSASAuthentication): url_quote(uri, '').lower(), signed and sent.
    target = quote(uri, safe="").lower()
    return f"SharedAccessSignature sig={quote(signed(target), safe='')}&se={EXPIRY}&skn=root&sr={target}"


def dotnet_httputility(uri: str) -> str:
    # PowerShell's documented recipe: [System.Web.HttpUtility]::UrlEncode (lower-case escapes) for sr and sig.
    def url_encode(text: str) -> str:
        return "".join(
            part if len(part) != 3 or not part.startswith("%") else part.lower()
            for part in _escapes(quote_plus(text))
        )

    target = url_encode(uri)
    return f"SharedAccessSignature sr={target}&sig={url_encode(signed(target))}&se={EXPIRY}&skn=root"


def _escapes(text: str) -> list[str]:
    out, i = [], 0
    while i < len(text):
        step = 3 if text[i] == "%" else 1
        out.append(text[i : i + step])
        i += step
    return out


def python_7x(uri: str) -> str:
    # azure-servicebus 7.x / the Azure docs' Python recipe: quote_plus (upper-case escapes), sig quoted.
    target = quote_plus(uri)
    return f"SharedAccessSignature sr={target}&sig={quote_plus(signed(target))}&se={EXPIRY}&skn=root"


def unencoded(uri: str) -> str:
    # Some hand-made tokens carry sr as plain text and sign its quote_plus form.
    return f"SharedAccessSignature sr={uri}&sig={quote_plus(signed(quote_plus(uri)))}&se={EXPIRY}&skn=root"


CLIENTS = [node_azure_sb, python_0x, dotnet_httputility, python_7x, unencoded]
URIS = [
    "https://localhost:8443/Orders/Messages?api-version=2016-07",  # Node: path, query string, port
    "https://localhost:8443:443/orders/messages",  # Python 0.x: host:port:443
    "http://127.0.0.1:8080/orders",
    "sb://ns.servicebus.windows.net/orders",
    "ns.servicebus.windows.net/orders",
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("uri", URIS)
def test_every_clients_token_is_accepted_and_scoped_to_the_decoded_path(client, uri):
    token = client(uri)
    caller = authenticate_sas(token, key_name="root", key=KEY, now=1000, path="/orders/Messages")
    assert caller.name == "sas:root"
    with pytest.raises(AuthenticationError):
        authenticate_sas(token, key_name="root", key=KEY, now=1000, path="/payments/messages")
    with pytest.raises(AuthenticationError):
        authenticate_sas(token, key_name="root", key="other", now=1000, path="/orders/messages")


def test_a_changed_resource_breaks_the_signature_whatever_its_escaping():
    token = node_azure_sb("https://h/orders")
    forged = token.replace("orders", "payments")
    with pytest.raises(AuthenticationError, match="signature"):
        authenticate_sas(forged, key_name="root", key=KEY, now=1000)


def test_scope_ignores_scheme_host_port_and_query_and_decodes_fully():
    assert resource_path("https%253a%252f%252fh%252fOrders%252fx") == "orders/x"
    assert resource_path("https://h:1:443/a/b/?x=1") == "a/b"
    assert resource_path("h") == ""
    assert sas_candidates("a%2Fb")[0] == "a%2Fb"
    assert "a%2fb" in sas_candidates("a%2Fb")


def test_reference_send_message_example_broker_properties():
    # Microsoft's "Send Message" example: State is read-only, ignored as Service Bus ignores it.
    ignored: list[str] = []
    body, props = rest_message(
        b"This is a message.",
        '{"Label":"M1","State":"Active","TimeToLive":10}',
        {"Priority": "High", "Customer": "12345,ABC"},
        "application/atom+xml;type=entry;charset=utf-8",
        ignored=ignored,
    )
    assert body == b"This is a message."
    assert ignored == ["State"]
    assert props == {
        "content_type": "application/atom+xml;type=entry;charset=utf-8",
        "subject": "M1",
        "time_to_live": 10,
        "application_properties": {"Priority": "High", "Customer": "12345,ABC"},
    }


def test_every_settable_broker_property_is_carried():
    _, props = rest_message(
        b"",
        '{"MessageId":"m","SessionId":"s","PartitionKey":"s","ViaPartitionKey":"v","TimeToLive":"1800",'
        '"ScheduledEnqueueTimeUtc":"Sun, 06 Nov 2033 08:49:37 GMT","CorrelationId":"c","Label":"l",'
        '"ReplyTo":"r","ReplyToSessionId":"rs","To":"t","ForcePersistence":true}',
        {},
        None,
    )
    assert props == {
        "message_id": "m",
        "session_id": "s",
        "partition_key": "s",
        "via_partition_key": "v",
        "time_to_live": 1800.0,  # Python's 0.x SDK sends the number as text
        "scheduled_enqueue_time_utc": "2033-11-06T08:49:37+00:00",
        "correlation_id": "c",
        "subject": "l",
        "reply_to": "r",
        "reply_to_session_id": "rs",
        "to": "t",
    }
    with pytest.raises(InvalidMessageError) as caught:
        rest_message(b"", '{"TimeToLive":"soon"}', {}, None)
    assert caught.value.code == "time_to_live_invalid"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0.00:00:40", 40),
        ("00:01:30.5", 90.5),
        ("1.02:03:04", 93784),
        ("00:05", 300),
        ("10675199.02:48:05", None),
    ],
)
def test_timespan_text(text, seconds):
    if seconds is None:
        assert timespan_seconds(text) > 9e11
    else:
        assert timespan_seconds(text) == seconds


@pytest.mark.parametrize("text", ["40", "0:60:00", "1.2.3", "", "00:00:00:00", 40])
def test_bad_timespan_text_is_refused(text):
    with pytest.raises(InvalidMessageError) as caught:
        timespan_seconds(text)
    assert caught.value.code == "time_to_live_invalid"


def test_batch_items_keep_json_types_base64_bodies_and_ignore_unknown_names():
    ignored: list[str] = []
    items = rest_batch(
        [
            {
                "Body": "This is the first message",
                "BrokerProperties": {"Label": "M1", "TimeToLiveTimeSpan": "0.00:00:40"},
            },
            {"Body": "AAH/", "BrokerProperties": {"IsBodyBase64": True, "SequenceNumber": 7}, "Extra": 1},
            {
                "Body": "x",
                "UserProperties": {"s": "12345", "t": "true", "q": '"x"', "n": 5, "f": 1.5, "b": False},
            },
        ],
        ignored,
    )
    assert items[0] == (b"This is the first message", {"subject": "M1", "time_to_live": 40})
    assert items[1] == (b"\x00\x01\xff", {})
    assert items[2][1]["application_properties"] == {
        "s": "12345",
        "t": "true",
        "q": '"x"',
        "n": 5,
        "f": 1.5,
        "b": False,
    }
    assert ignored == ["Extra", "SequenceNumber"]
    with pytest.raises(InvalidMessageError) as caught:
        rest_batch([{"Body": "!!", "BrokerProperties": {"IsBodyBase64": True}}])
    assert caught.value.code == "body_invalid_base64"


def test_only_rfc9218_priority_is_an_http_header():
    assert is_http_priority("priority", "u=3, i")
    assert not is_http_priority("priority", "High")
    assert not is_http_priority("customer", "u=1")


def test_the_redis_door_takes_the_same_new_fields():
    _, props = redis_door_message(
        {b"body": b"x", b"reply_to_session_id": b"rs", b"via_partition_key": b"v"}, "id-1"
    )
    assert props == {"message_id": "id-1", "reply_to_session_id": "rs", "via_partition_key": "v"}


def test_ignored_names_are_safe_in_a_header():
    assert ignored_names(["State", "State", "Sequence Number"]) == "State, Sequence%20Number"
    assert (
        ignored_names(["a\r\nSet-Cookie: x", "\u00e9\u4e2d"]) == "a%0D%0ASet-Cookie%3A%20x, %C3%A9%E4%B8%AD"
    )
    assert ignored_names([f"p{n}" for n in range(25)]).endswith("p19, ...")


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("Bearer abc", "malformed SharedAccessSignature"),
        ("SharedAccessSignature", "malformed SharedAccessSignature"),
        ("SharedAccessSignature sr=h&se=1", "SharedAccessSignature lacks sr, sig, se or skn"),
        (
            "SharedAccessSignature sr=h&sig=x&se=soon&skn=root",
            "SharedAccessSignature lacks sr, sig, se or skn",
        ),
        (
            "SharedAccessSignature sr=h&sig=x&se=1&skn=other",
            "SharedAccessSignature names an unknown key",
        ),
        ("SharedAccessSignature sr=h&sig=x&se=999&skn=root", "SharedAccessSignature has expired"),
        (
            "SharedAccessSignature sr=h&sig=x&se=1000&skn=root",
            "SharedAccessSignature signature does not match",
        ),
    ],
)
def test_each_sas_refusal_says_what_is_wrong(token: str, message: str) -> None:
    with pytest.raises(AuthenticationError) as caught:
        authenticate_sas(token, key_name="root", key=KEY, now=1000)
    assert str(caught.value) == message


def test_a_token_for_another_entity_is_refused_as_such() -> None:
    with pytest.raises(AuthenticationError) as caught:
        authenticate_sas(python_7x("https://h/orders"), key_name="root", key=KEY, now=1000, path="/payments")
    assert str(caught.value) == "SharedAccessSignature is for another resource"


def test_a_token_is_good_up_to_its_expiry_second_and_stray_parts_are_ignored() -> None:
    token = python_7x("https://h/orders")
    assert authenticate_sas(token, key_name="root", key=KEY, now=EXPIRY, path="/orders").name == "sas:root"
    # a part without "=" (and a second sr) do not replace the signed resource
    stray = token.replace("SharedAccessSignature ", "SharedAccessSignature sr&", 1) + "&sr=https://h/payments"
    assert authenticate_sas(stray, key_name="root", key=KEY, now=1000, path="/orders").name == "sas:root"


@pytest.mark.parametrize(
    ("resource", "path"),
    [
        ("https://h/Orders/x?api=1?b=2", "orders/x"),  # the first "?" ends the path
        ("https://h/Orders/x#f#g", "orders/x"),  # the first "#" too
        ("https://h/XOrders/", "xorders"),
        ("https://h/a/b://c", "a/b://c"),  # after the host, the path is all there is
    ],
)
def test_the_scope_is_the_path_after_the_host(resource: str, path: str) -> None:
    assert resource_path(resource) == path


def test_a_request_path_is_in_scope_whatever_its_case_and_slashes() -> None:
    assert within_scope("xorders", "/XOrders/")
    assert not within_scope("orders", "/orders2")


def test_the_fully_escaped_resource_is_a_candidate() -> None:
    assert "https%3A%2F%2Fh%2Fmy%20q" in sas_candidates("https://h/my q")
