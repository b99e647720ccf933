"""Replay and snapshot of a namespace: the write-ahead log's records applied to, and read from, the model.

Record kinds, each ``(kind, fields, blobs)`` as ``bridge.emulator.wal`` frames them:

- ``put`` / ``del`` / ``wipe``: catalog changes (an entity description, a deletion, a disaster);
- ``send``: messages accepted by a queue or topic (routing and duplicate detection run again on replay,
  so the outcome is the one the original send had);
- ``rm`` / ``dl`` / ``dc`` / ``st``: a message left, was dead-lettered, had its delivery count or its
  state changed (the store journals these as they happen);
- ``raw``: a message's new encoded bytes (its properties modified as a receiver settled it);
- ``ss``: a session's state blob;
- ``seq`` / ``msg``: snapshot-only records, a queue's or topic's sequence counter and duplicate window,
  and one message exactly as it stands.

At start the server replays the log with the journal detached (so replay writes nothing), then rewrites
it as ``snapshot`` so the log only ever holds the live state plus what happened since.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bridge.emulator.errors import EntityNotFoundError
from bridge.emulator.model.descriptions import EntityKind, RuleDescription, path_of
from bridge.emulator.model.entities import Queue, Topic
from bridge.emulator.model.messages import MessageState, StoredMessage
from bridge.emulator.model.namespace import Namespace
from bridge.emulator.model.records import description_from_dict, description_to_dict, incoming_from_record
from bridge.emulator.model.store import MessageStore

Record = tuple[str, dict[str, Any], list[bytes]]
DEFAULT_RULE = "$default"


def apply_record(ns: Namespace, kind: str, fields: dict[str, Any], blobs: list[bytes]) -> None:
    """Replay one journal or snapshot record into ``ns`` (its journal must be detached)."""
    if kind == "put":
        desc = description_from_dict(fields["d"])
        rule = description_from_dict(fields["rule"]) if "rule" in fields else None
        default_rule = rule if isinstance(rule, RuleDescription) else None
        ns.put(desc, fields["now"], create=bool(fields["new"]), default_rule=default_rule)
    elif kind == "del":
        ns.drop(EntityKind(fields["k"]), fields["p"])
    elif kind == "send":
        target = ns.send_target(fields["p"])
        if target is not None:  # the entity was deleted later in the log
            msgs = [incoming_from_record(f, raw) for f, raw in zip(fields["m"], blobs, strict=True)]
            ns.enqueue(target, msgs, fields["now"])
    elif kind == "wipe":
        ns.queues.clear()
        ns.topics.clear()
    elif kind == "seq":
        target = ns.send_target(fields["p"])
        if target is not None:
            target.last_seq = fields["n"]
            for mid, at in fields.get("dd", {}).items():
                target.dedup.remember(mid, at)
    else:
        _apply_store_record(ns, kind, fields, blobs)


def _apply_store_record(ns: Namespace, kind: str, fields: dict[str, Any], blobs: list[bytes]) -> None:
    try:
        store = ns.store(fields["p"])
    except EntityNotFoundError:
        return  # the entity was deleted later in the log
    if kind == "msg":
        store.place(StoredMessage.from_record(fields["m"], blobs[0]))
    elif kind == "ss":
        store.sessions.set_state(fields["sid"], blobs[0] if blobs else None)
    else:
        found = store.messages.get(fields["s"])
        if found is None:
            return
        if kind == "rm":
            store.remove(found.seq)
        elif kind == "dl":
            store.move_to_dead_letter(found, fields.get("r"), fields.get("d"), journal=False)
        elif kind == "dc":
            found.delivery_count = fields["dc"]
        elif kind == "raw":
            store.replace_raw(found, blobs[0], journal=False)
        elif kind == "st":
            # Re-place rather than assign, so the message leaves the ready heap it was in.
            store.remove(found.seq)
            found.state = MessageState(fields["st"])
            store.place(found)


def snapshot(ns: Namespace) -> Iterator[Record]:
    """The live state of ``ns`` as records that ``apply_record`` rebuilds it from."""
    for queue in ns.queues.values():
        yield "put", {"d": description_to_dict(queue.desc), "now": queue.created_at, "new": True}, []
    for topic in ns.topics.values():
        yield "put", {"d": description_to_dict(topic.desc), "now": topic.created_at, "new": True}, []
        for sub in topic.subscriptions.values():
            yield "put", {"d": description_to_dict(sub.desc), "now": sub.created_at, "new": True}, []
            catch_all = RuleDescription(sub.desc.topic_name, sub.desc.name)
            for key, rule in sub.rules.items():
                # ``$Default`` comes back with the subscription; written only when it is not the catch-all.
                if key != DEFAULT_RULE or rule.desc != catch_all:
                    fields = {
                        "d": description_to_dict(rule.desc),
                        "now": sub.created_at,
                        "new": key != DEFAULT_RULE,
                    }
                    yield "put", fields, []
            # Creating the subscription on replay brings back ``$Default``; a deleted one must go again.
            if DEFAULT_RULE not in sub.rules:
                default = RuleDescription(sub.desc.topic_name, sub.desc.name)
                yield "del", {"k": "rule", "p": path_of(default)}, []
    targets: list[Queue | Topic] = [*ns.queues.values(), *ns.topics.values()]
    for target in targets:
        yield "seq", {"p": target.desc.name, "n": target.last_seq, "dd": dict(target.dedup.seen)}, []
    for store in ns.stores():
        yield from _store_records(store)


def _store_records(store: MessageStore) -> Iterator[Record]:
    for sub_store in (store, store.dlq):
        if sub_store is None:
            continue
        for msg in sub_store.messages.values():
            yield "msg", {"p": sub_store.path, "m": msg.to_record()}, [msg.raw]
    for sid, state in store.sessions.state.items():
        yield "ss", {"p": store.path, "sid": sid}, [state]
