"""The Atom/XML codec: parses what the SDK sends, and the SDK's own models read what it renders."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from azure.servicebus.management import (
    CorrelationRuleFilter as SdkCorrelationFilter,
)
from azure.servicebus.management import (
    FalseRuleFilter,
    QueueProperties,
    QueueRuntimeProperties,
    RuleProperties,
    SqlRuleAction,
    SubscriptionProperties,
    SubscriptionRuntimeProperties,
    TopicRuntimeProperties,
    TrueRuleFilter,
)
from azure.servicebus.management import (
    SqlRuleFilter as SdkSqlFilter,
)
from azure.servicebus.management._generated.models import (
    CreateQueueBody,
    CreateQueueBodyContent,
    CreateRuleBody,
    CreateRuleBodyContent,
    QueueDescriptionEntry,
    QueueDescriptionFeed,
    RuleDescriptionEntry,
    SubscriptionDescriptionEntry,
    TopicDescriptionEntry,
)
from azure.servicebus.management._utils import deserialize_rule_key_values, serialize_rule_key_values

from bridge.emulator.errors import ArgumentError
from bridge.emulator.http.atom import (
    SB,
    parse_default_rule,
    parse_description,
    render_entry,
    render_error,
    render_feed,
)
from bridge.emulator.http.timespans import format_duration, parse_duration
from bridge.emulator.model.descriptions import (
    MAX_DURATION,
    CorrelationRuleFilter,
    QueueDescription,
    RuleDescription,
    RuntimeCounts,
    SqlRuleFilter,
    SubscriptionDescription,
    TopicDescription,
)
from bridge.emulator.model.descriptions import SqlRuleAction as EmulatorSqlRuleAction

PROPS = {"a": "x", "n": 3, "b": True, "f": 1.5}
COUNTS = RuntimeCounts(
    active_message_count=3,
    dead_letter_message_count=2,
    scheduled_message_count=1,
    transfer_message_count=0,
    size_in_bytes=1234,
    total_message_count=6,
    subscription_count=4,
    created_at=1_700_000_000.0,
    updated_at=1_700_000_100.5,
    accessed_at=1_700_000_200.0,
)


def sdk_body(element: Any) -> bytes:
    """What the SDK puts on the wire: its serializer's XML with the XML workaround policy applied."""
    raw = ET.tostring(element, encoding="utf-8", xml_declaration=True)
    return raw.replace(b"ns1:", b"").replace(b":ns1", b"")


def sdk_queue_body(**options: Any) -> bytes:
    internal = QueueProperties("ignored", **{k: None for k in _QUEUE_OPTIONS} | options)._to_internal_entity(
        "127.0.0.1:5700"
    )
    return sdk_body(
        CreateQueueBody(content=CreateQueueBodyContent(queue_description=internal)).serialize(is_xml=True)
    )


_QUEUE_OPTIONS = [
    "authorization_rules",
    "auto_delete_on_idle",
    "dead_lettering_on_message_expiration",
    "default_message_time_to_live",
    "duplicate_detection_history_time_window",
    "availability_status",
    "enable_batched_operations",
    "enable_express",
    "enable_partitioning",
    "lock_duration",
    "max_delivery_count",
    "max_size_in_megabytes",
    "requires_duplicate_detection",
    "requires_session",
    "status",
    "forward_to",
    "user_metadata",
    "forward_dead_lettered_messages_to",
    "max_message_size_in_kilobytes",
]


def sdk_rule_body(rule_filter: Any) -> bytes:
    rule = RuleProperties("r1", filter=rule_filter, action=None, created_at_utc=None)
    element = CreateRuleBody(
        content=CreateRuleBodyContent(rule_description=rule._to_internal_entity())
    ).serialize(is_xml=True)
    serialize_rule_key_values(element, rule)
    return sdk_body(element)


# ---- durations ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PT1M", dt.timedelta(minutes=1)),
        ("PT30S", dt.timedelta(seconds=30)),
        ("PT300S", dt.timedelta(minutes=5)),
        ("P14D", dt.timedelta(days=14)),
        ("P2W", dt.timedelta(days=14)),
        ("P1DT2H3M4.5S", dt.timedelta(days=1, hours=2, minutes=3, seconds=4.5)),
        ("P10675199DT2H48M5.4775807S", MAX_DURATION),
        ("P10675199DT2H48M5.47758S", MAX_DURATION),  # what isodate writes for the SDK's adjusted "never"
        ("P99999999D", MAX_DURATION),
        ("PT0S", dt.timedelta(0)),
    ],
)
def test_parse_duration(text: str, expected: dt.timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "P", "PT", "1M", "P1Y", "P1M", "PT-1S", "P1DT", "PT1.S", "soon"])
def test_bad_durations_name_the_field(text: str) -> None:
    with pytest.raises(ArgumentError, match="LockDuration"):
        parse_duration(text, "LockDuration")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (dt.timedelta(minutes=1), "PT1M"),
        (dt.timedelta(days=14), "P14D"),
        (dt.timedelta(seconds=90.25), "PT1M30.25S"),
        (dt.timedelta(0), "PT0S"),
        (MAX_DURATION, "P10675199DT2H48M5.4775807S"),
    ],
)
def test_format_duration_round_trips(value: dt.timedelta, text: str) -> None:
    assert format_duration(value) == text
    assert parse_duration(text) == value


# ---- parsing what the SDK sends ------------------------------------------------------------------------
def test_queue_body_from_the_sdk() -> None:
    body = sdk_queue_body(
        lock_duration=dt.timedelta(seconds=30),
        max_delivery_count=5,
        requires_session=True,
        default_message_time_to_live=dt.timedelta(hours=1),
        enable_partitioning=True,
        dead_lettering_on_message_expiration=True,
        max_size_in_megabytes=2048,
        auto_delete_on_idle=dt.timedelta(minutes=10),
        requires_duplicate_detection=True,
        enable_batched_operations=False,
        user_metadata="m",
    )
    desc = parse_description(body, "q1")
    assert desc == QueueDescription(
        name="q1",
        lock_duration=dt.timedelta(seconds=30),
        max_delivery_count=5,
        requires_session=True,
        default_message_time_to_live=dt.timedelta(hours=1),
        enable_partitioning=True,
        dead_lettering_on_message_expiration=True,
        max_size_in_megabytes=2048,
        auto_delete_on_idle=dt.timedelta(minutes=10),
        requires_duplicate_detection=True,
        enable_batched_operations=False,
        user_metadata="m",
    )


def test_empty_description_takes_azure_defaults() -> None:
    assert parse_description(sdk_queue_body(), "q1") == QueueDescription(name="q1")


@pytest.mark.parametrize(
    ("sdk_filter", "expected"),
    [
        (TrueRuleFilter(), SqlRuleFilter("1=1")),
        (FalseRuleFilter(), SqlRuleFilter("1=0")),
        (SdkSqlFilter("color = 'red' AND n > 3"), SqlRuleFilter("color = 'red' AND n > 3")),
        (
            SdkCorrelationFilter(correlation_id="c", label="L", properties=dict(PROPS)),
            CorrelationRuleFilter(correlation_id="c", label="L", properties=dict(PROPS)),
        ),
        (
            SdkCorrelationFilter(
                session_id="s",
                to="t",
                reply_to="r",
                message_id="m",
                content_type="ct",
                reply_to_session_id="rs",
            ),
            CorrelationRuleFilter(
                session_id="s",
                to="t",
                reply_to="r",
                message_id="m",
                content_type="ct",
                reply_to_session_id="rs",
            ),
        ),
    ],
)
def test_rule_body_from_the_sdk(sdk_filter: Any, expected: Any) -> None:
    desc = parse_description(sdk_rule_body(sdk_filter), "r1", "t1", "s1")
    assert desc == RuleDescription("t1", "s1", "r1", expected)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<entry><content/></entry>", "no <content>"),
        (b"not xml", "not well-formed"),
        (b"<feed/>", "expected an Atom <entry>"),
        (b"<!DOCTYPE x [<!ENTITY a 'b'>]><entry/>", "DTD"),
        (
            b"<entry><content><QueueDescription><MaxDeliveryCount>0</MaxDeliveryCount></QueueDescription>"
            b"</content></entry>",
            "MaxDeliveryCount",
        ),
        (
            b"<entry><content><QueueDescription><RequiresSession>yes</RequiresSession></QueueDescription>"
            b"</content></entry>",
            "RequiresSession",
        ),
        (
            b"<entry><content><QueueDescription><LockDuration>1 minute</LockDuration></QueueDescription>"
            b"</content></entry>",
            "LockDuration",
        ),
        (b"<entry><content><SubscriptionDescription/></content></entry>", "does not describe"),
    ],
)
def test_bad_bodies_are_refused_with_the_field(body: bytes, reason: str) -> None:
    with pytest.raises(ArgumentError, match=reason):
        parse_description(body, "q1")


def test_rule_actions_and_parameters_are_read() -> None:
    action = SqlRuleAction("SET a = @p; REMOVE b", parameters={"@p": 1})
    rule = RuleProperties(
        "r1", filter=SdkSqlFilter("a = @q", parameters={"@q": "x"}), action=action, created_at_utc=None
    )
    element = CreateRuleBody(
        content=CreateRuleBodyContent(rule_description=rule._to_internal_entity())
    ).serialize(is_xml=True)
    serialize_rule_key_values(element, rule)
    desc = parse_description(sdk_body(element), "r1", "t1", "s1")
    assert isinstance(desc, RuleDescription)
    assert desc.filter == SqlRuleFilter("a = @q", {"@q": "x"})
    assert desc.action == EmulatorSqlRuleAction("SET a = @p; REMOVE b", {"@p": 1})


def test_a_parameter_of_an_unsupported_type_is_refused_not_ignored() -> None:
    body = sdk_rule_body(SdkSqlFilter("a = @p", parameters={"@p": dt.datetime(2024, 1, 1, tzinfo=dt.UTC)}))
    with pytest.raises(ArgumentError, match="Parameters"):
        parse_description(body, "r1", "t1", "s1")


# ---- what the SDK reads back ---------------------------------------------------------------------------
def test_queue_entry_reads_back_through_the_sdk_models() -> None:
    desc = QueueDescription(
        name="q1",
        lock_duration=dt.timedelta(seconds=45),
        max_delivery_count=7,
        requires_session=True,
        forward_to="sb://h/q2",
        user_metadata="a<b&c",
    )
    xml = ET.fromstring(render_entry(desc, "https://h/q1?api-version=2021-05", COUNTS, author="ns"))
    entry = QueueDescriptionEntry.deserialize(xml)
    assert entry.title == "q1"
    props = QueueProperties._from_internal_entity("q1", entry.content.queue_description)
    assert (props.lock_duration, props.max_delivery_count, props.requires_session) == (
        dt.timedelta(seconds=45),
        7,
        True,
    )
    assert props.default_message_time_to_live.days == MAX_DURATION.days
    assert (props.forward_to, props.user_metadata, props.status) == ("sb://h/q2", "a<b&c", "Active")
    runtime = QueueRuntimeProperties._from_internal_entity("q1", entry.content.queue_description)
    assert (
        runtime.active_message_count,
        runtime.dead_letter_message_count,
        runtime.scheduled_message_count,
        runtime.total_message_count,
        runtime.size_in_bytes,
    ) == (3, 2, 1, 6, 1234)
    assert runtime.created_at_utc == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)
    assert runtime.updated_at_utc.timestamp() == pytest.approx(1_700_000_100.5)


def test_topic_and_subscription_entries_read_back() -> None:
    topic = TopicDescriptionEntry.deserialize(
        ET.fromstring(
            render_entry(TopicDescription(name="t1", enable_partitioning=True), "u", COUNTS, author="ns")
        )
    )
    runtime = TopicRuntimeProperties._from_internal_entity("t1", topic.content.topic_description)
    assert (runtime.subscription_count, runtime.scheduled_message_count) == (4, 1)
    assert topic.content.topic_description.enable_partitioning is True
    sub_entry = SubscriptionDescriptionEntry.deserialize(
        ET.fromstring(
            render_entry(
                SubscriptionDescription(
                    topic_name="t1", name="s1", dead_lettering_on_message_expiration=True
                ),
                "u",
                COUNTS,
                author="ns",
            )
        )
    )
    props = SubscriptionProperties._from_internal_entity("s1", sub_entry.content.subscription_description)
    assert props.dead_lettering_on_message_expiration is True
    sub_runtime = SubscriptionRuntimeProperties._from_internal_entity(
        "s1", sub_entry.content.subscription_description
    )
    assert (sub_runtime.active_message_count, sub_runtime.dead_letter_message_count) == (3, 2)


@pytest.mark.parametrize(
    ("rule_filter", "sdk_type", "fields"),
    [
        (SqlRuleFilter("1=1"), "TrueRuleFilter", {"sql_expression": "1=1"}),
        (SqlRuleFilter("1=0"), "FalseRuleFilter", {"sql_expression": "1=0"}),
        (SqlRuleFilter("a = 'x'"), "SqlRuleFilter", {"sql_expression": "a = 'x'"}),
        (
            CorrelationRuleFilter(
                correlation_id="c", properties={"s": "v", "n": 2, "big": 2**40, "b": False, "f": 0.5}
            ),
            "CorrelationRuleFilter",
            {"correlation_id": "c", "properties": {"s": "v", "n": 2, "big": 2**40, "b": False, "f": 0.5}},
        ),
    ],
)
def test_rule_entries_read_back(rule_filter: Any, sdk_type: str, fields: dict[str, Any]) -> None:
    rendered = render_entry(RuleDescription("t1", "s1", "r1", rule_filter), "u", None, author="ns")
    element = ET.fromstring(rendered)
    entry = RuleDescriptionEntry.deserialize(element)
    rule = RuleProperties._from_internal_entity("r1", entry.content.rule_description)
    deserialize_rule_key_values(element, rule)
    assert type(rule.filter).__name__ == sdk_type
    for name, value in fields.items():
        assert getattr(rule.filter, name) == value


def test_feed_with_next_link_pages_like_azure() -> None:
    entries = [(QueueDescription(name=f"q{i}"), f"https://h/q{i}", COUNTS) for i in range(2)]
    body = render_feed(
        "Queues",
        "https://h/$Resources/queues",
        entries,
        author="ns",
        next_url="https://h/$Resources/queues?$skip=2&$top=2",
        now=0.0,
    )
    feed = QueueDescriptionFeed.deserialize(ET.fromstring(body))
    assert [e.title for e in feed.entry] == ["q0", "q1"]
    assert len(feed.link) == 2 and feed.link[1].href.endswith("$skip=2&$top=2")
    last = QueueDescriptionFeed.deserialize(
        ET.fromstring(render_feed("Queues", "u", [], author="ns", next_url=None, now=0.0))
    )
    assert not last.entry and len(last.link) == 1


def test_error_body_is_escaped() -> None:
    assert render_error(404, "no <q1> & co") == (
        b'<?xml version="1.0" encoding="utf-8"?><Error><Code>404</Code>'
        b"<Detail>no &lt;q1&gt; &amp; co</Detail></Error>"
    )


# What @azure/service-bus 7.9.5 sends for createSubscription("t1", "s1", {defaultRuleOptions}) (its
# serializers, stringified by @azure/core-xml): the first rule inside the subscription's description.
JS_SUBSCRIPTION = b"""<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<entry xmlns="http://www.w3.org/2005/Atom"><updated>2026-01-01T00:00:00.000Z</updated>
<content type="application/xml"><SubscriptionDescription
 xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
 xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><DefaultRuleDescription>
<Filter p4:type="CorrelationFilter" xmlns:p4="http://www.w3.org/2001/XMLSchema-instance">
<CorrelationId>red</CorrelationId><Properties><KeyValueOfstringanyType><Key>shade</Key>
<Value p4:type="l28:long" xmlns:l28="http://www.w3.org/2001/XMLSchema">1</Value></KeyValueOfstringanyType>
</Properties></Filter><Action p4:type="EmptyRuleAction" xmlns:p4="http://www.w3.org/2001/XMLSchema-instance"/>
<Name>red</Name></DefaultRuleDescription><MaxDeliveryCount>4</MaxDeliveryCount></SubscriptionDescription>
</content></entry>"""


def test_a_subscription_body_names_its_first_rule() -> None:
    rule = parse_default_rule(JS_SUBSCRIPTION, "t1", "s1")

    assert rule == RuleDescription("t1", "s1", "red", CorrelationRuleFilter("red", properties={"shade": 1}))
    assert parse_description(JS_SUBSCRIPTION, "s1", "t1") == SubscriptionDescription(
        "t1", "s1", max_delivery_count=4
    )
    plain = JS_SUBSCRIPTION.replace(b"DefaultRuleDescription", b"Unrelated")
    assert parse_default_rule(plain, "t1", "s1") is None


def test_queue_and_topic_entries_carry_enable_express() -> None:
    for desc in (QueueDescription(name="q", enable_express=True), TopicDescription(name="t")):
        root = ET.fromstring(render_entry(desc, "https://h/x", RuntimeCounts(), author="ns"))
        express = root.find(f".//{{{SB}}}EnableExpress")
        assert express is not None and express.text == (
            "true" if isinstance(desc, QueueDescription) else "false"
        )
