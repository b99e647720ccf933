"""What every HTTP route shares: settings, the outbox (writes, its batcher, its read side ``view``),
authentication, body limits.

``Ingress`` is built once by the app's lifespan and reached through ``request.app.state.ingress``; routes
stay a few lines: authenticate, read a bounded body, decode the door's format, validate (``bridge.core``),
``submit`` the group, answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from starlette.requests import ClientDisconnect, Request

from bridge.core.auth import ApiKey, Caller, authenticate_key, authenticate_sas
from bridge.core.envelope import Envelope
from bridge.core.validation import EntityRules, build_envelope, check_batch, validate_entity
from bridge.errors import AuthenticationError, InvalidMessageError, MessageTooLargeError, UnknownEntityError
from bridge.observability import metrics, tracing
from bridge.observability.tracing import DoorTrace
from bridge.outbox.batcher import WriteBatcher
from bridge.outbox.store import AsyncOutbox
from bridge.outbox.view import AsyncOutboxView
from bridge.outbox.writer import Ack
from bridge.settings import Settings

ANONYMOUS = Caller(name="anonymous")


def new_message_id() -> str:
    """A random 128-bit MessageId as 32 hex digits."""
    return os.urandom(16).hex()


def message_id_source(count: int) -> Callable[[], str]:
    """``new_message_id`` for up to ``count`` messages from one read of the system's random source.

    Each id is 16 bytes of their own from ``os.urandom`` (the same source and the same 128 random bits as
    ``new_message_id``), read in one system call instead of one per message: for a batch of 100 that call
    was the largest single cost of validating it (``docs/doors/http.md``, "Where the time goes").
    """
    digits = os.urandom(16 * count).hex()
    return iter([digits[start : start + 32] for start in range(0, len(digits), 32)]).__next__


class Ingress:
    """Shared state of the HTTP door."""

    def __init__(self, settings: Settings, outbox: AsyncOutbox, *, require_auth: bool) -> None:
        self.settings = settings
        self.outbox = outbox
        self.view = AsyncOutboxView(outbox.client, settings)
        self.writer = outbox.writer
        # A confirmation (WAIT/WAITAOF) is a wait on the replicas, not work on the primary: while one
        # pipeline waits for it, the next one's write is on the wire (bridge.outbox.batcher).
        self.batcher = WriteBatcher(outbox, max_in_flight=2 if outbox.writer.durability.waits else 1)
        self.require_auth = require_auth
        ingress = settings.ingress
        self.keys = [
            ApiKey(k.name, k.sha256, frozenset(k.entities) if k.entities is not None else None)
            for k in ingress.api_keys
        ]
        self.sas_key_name = ingress.sas_key_name
        self.sas_key = ingress.sas_key.get_secret_value() if ingress.sas_key else None
        self.max_request_bytes = ingress.max_request_bytes
        self.body_read_timeout = ingress.body_read_timeout

    def authenticate(self, request: Request, *, allow_sas: bool = False) -> Caller:
        """The caller of ``request``; anonymous only when authentication is not required."""
        headers = request.headers
        authorization = headers.get("authorization")
        api_key = headers.get("x-api-key")
        if authorization and authorization.startswith("Bearer "):
            api_key = authorization[7:].strip()
        if api_key:
            return authenticate_key(api_key, self.keys)
        if authorization and authorization.startswith("SharedAccessSignature"):
            if not allow_sas or self.sas_key is None or self.sas_key_name is None:
                raise AuthenticationError("SharedAccessSignature is not accepted here")
            return authenticate_sas(
                authorization,
                key_name=self.sas_key_name,
                key=self.sas_key,
                now=time.time(),
                path=request.url.path,
            )
        if self.require_auth:
            raise AuthenticationError("credentials required: Authorization: Bearer <key> or x-api-key")
        return ANONYMOUS

    def check_entity(self, caller: Caller, entity: str) -> None:
        """Entity path rules, the caller's allow-list and, if configured, the list of known entities."""
        validate_entity(entity)
        caller.check_entity(entity)
        if self.settings.ingress.only_configured_entities and entity not in self.settings.entities:
            raise UnknownEntityError(f"entity {entity!r} is not configured")

    async def body(self, request: Request) -> bytes:
        """The request body, refused with 413 as soon as it passes ``max_request_bytes``.

        The whole body must arrive within ``ingress.body_read_timeout`` seconds (408 ``request_timeout``
        otherwise): uvicorn bounds neither a body's pace nor its duration, so without this a client
        trickling bytes would hold the request, its buffers and its connection for as long as it likes.
        """
        limit = self.max_request_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
            raise MessageTooLargeError("request_too_large", f"request body exceeds {limit} bytes")
        chunks = []
        size = 0
        try:
            async with asyncio.timeout(self.body_read_timeout):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise MessageTooLargeError("request_too_large", f"request body exceeds {limit} bytes")
                    chunks.append(chunk)
        except TimeoutError:
            raise InvalidMessageError(
                "request_timeout", f"the body did not arrive within {self.body_read_timeout:g} s"
            ) from None
        except ClientDisconnect:
            raise InvalidMessageError(
                "request_incomplete", "the client closed the connection before the body was complete"
            ) from None
        return b"".join(chunks)

    def trace(self, request: Request, entity: str, door: str) -> DoorTrace | None:
        """The creation contexts of this request's messages (``bridge.observability.tracing``): None, at
        the cost of one header lookup, when it carries no ``traceparent`` and this process does not trace."""
        headers = request.headers
        traceparent = headers.get("traceparent")
        if traceparent is None and not tracing.enabled():
            return None
        return tracing.door_trace(entity, door, traceparent, headers.get("tracestate"))

    async def json_body(self, request: Request) -> Any:
        """The body parsed as JSON (UTF-8), or ``invalid_json`` (400)."""
        raw = await self.body(request)
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: nested too deep
            raise InvalidMessageError("invalid_json", "request body is not UTF-8 JSON") from None

    def envelopes(
        self,
        entity: str,
        items: Sequence[tuple[bytes, dict[str, Any]]],
        *,
        single: bool = False,
        trace: DoorTrace | None = None,
    ) -> tuple[list[Envelope], list[bool]]:
        """Validate decoded messages; ``fresh[i]`` is True when message ``i`` got a new MessageId.

        With ``trace`` (``door_trace``), each message gets its creation context from it.
        """
        rules = self.writer.policy(entity).rules
        now = time.time()
        new_id = message_id_source(len(items)) if len(items) > 1 else new_message_id
        envelopes: list[Envelope] = []
        fresh: list[bool] = []
        try:
            self._build(
                entity,
                items,
                rules,
                now=now,
                new_id=new_id,
                single=single,
                trace=trace,
                out=(envelopes, fresh),
            )
        except BaseException as exc:
            if trace is not None:
                trace.failed(exc)
            raise
        return envelopes, fresh

    def check_batch(self, envelopes: list[Envelope], *, transactional: bool, trace: DoorTrace | None) -> None:
        """``bridge.core.validation.check_batch`` for a door's batch; a refused batch ends its create spans
        (``trace``) as failed, as a refusal while building them does."""
        try:
            limit = self.settings.ingress.max_batch_messages
            check_batch(envelopes, transactional=transactional, max_messages=limit)
        except BaseException as exc:
            if trace is not None:
                trace.failed(exc)
            raise

    @staticmethod
    def _build(
        entity: str,
        items: Sequence[tuple[bytes, dict[str, Any]]],
        rules: EntityRules,
        *,
        now: float,
        new_id: Callable[[], str],
        single: bool,
        trace: DoorTrace | None,
        out: tuple[list[Envelope], list[bool]],
    ) -> None:
        envelopes, fresh = out
        for index, (body, given) in enumerate(items):
            props = given
            fresh.append(props.get("message_id") is None)
            if trace is not None:
                traceparent, tracestate = trace.context()
                props = {**props, "traceparent": traceparent, "tracestate": tracestate}
            envelopes.append(
                build_envelope(
                    entity,
                    body,
                    props,
                    rules=rules,
                    now=now,
                    new_id=new_id,
                    index=None if single else index,
                )
            )

    async def store(
        self,
        entity: str,
        envelopes: list[Envelope],
        fresh: list[bool],
        *,
        transactional: bool = False,
        door: str = "http",
        trace: DoorTrace | None = None,
    ) -> list[Ack]:
        """Write atomically through the batcher; returns once Redis accepted (or raises)."""
        group = self.writer.group(entity, envelopes, transactional=transactional, fresh=fresh, door=door)
        if trace is None:
            acks = await self.batcher.submit(group)
        else:
            try:
                acks = await self.batcher.submit(group)
            except BaseException as exc:
                trace.failed(exc)
                raise
            trace.stored([ack.message_id for ack in acks], [ack.duplicate for ack in acks])
        duplicates = sum(1 for ack in acks if ack.duplicate)
        metrics.record_ingress("http", entity, len(acks) - duplicates, duplicates)
        return acks
