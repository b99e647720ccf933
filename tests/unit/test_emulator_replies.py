"""Which reply link answers a request: by reply-to as target address, as link name, or the request link's
source address (``bridge/emulator/amqp/replies.py``), on real proton link objects."""

from __future__ import annotations

from proton import Connection, Sender

from bridge.emulator.amqp.replies import ReplyLinks


def links(*names: str) -> list[Sender]:
    session = Connection().session()
    return [session.sender(name) for name in names]


def test_reply_to_names_the_target_address_first_then_the_link_name() -> None:
    by_address, by_name = links("mgmt-link", "cbs-5f0c")
    replies = ReplyLinks()
    replies.add(by_address, "reply-address")
    replies.add(by_name, None)  # the JavaScript SDK's $cbs reply link: a name, no target
    assert replies.find("reply-address", None) == by_address
    assert replies.find("cbs-5f0c", None) == by_name
    assert replies.find("nobody", None) is None


def test_without_a_matching_reply_to_the_request_links_source_address_is_the_key() -> None:
    (python_style,) = links("receiver-link")
    replies = ReplyLinks()
    replies.add(python_style, "mgmt-source-1")
    assert replies.find(None, "mgmt-source-1") == python_style
    assert replies.find("unknown", "mgmt-source-1") == python_style
    assert replies.find(None, "other") is None


def test_a_detached_link_answers_nothing_and_a_reattach_replaces_it() -> None:
    old, new = links("cbs-1", "cbs-1")
    replies = ReplyLinks()
    replies.add(old, None)
    replies.add(new, None)
    assert replies.find("cbs-1", None) == new
    replies.remove(new)
    assert replies.find("cbs-1", None) == old
    old.open()
    old.close()  # closed on our side: never answered on again
    assert replies.find("cbs-1", None) is None
