"""The HTTPS management endpoint of a local namespace: what ``ServiceBusAdministrationClient`` calls.

Routes (paths compare case-insensitively, segments are percent-decoded one by one, as the SDK quotes each
name with ``safe=""`` — ``_generated/operations/_operations.py``):

- ``GET|PUT|DELETE /<queue-or-topic>``; ``/<topic>/subscriptions/<sub>``;
  ``/<topic>/subscriptions/<sub>/rules/<rule>``. PUT without ``If-Match`` creates (201, the entry echoed
  back; 409 if it exists); with ``If-Match: *`` (the SDK's ``update_*``) it replaces (200; 404 if missing).
- ``GET /$Resources/queues``, ``/$Resources/topics``, ``/<topic>/subscriptions``,
  ``/<topic>/subscriptions/<sub>/rules`` with ``$skip``/``$top`` paging (default 0/100).
- ``GET /$namespaceinfo`` for ``get_namespace_properties``.

Every request needs ``Authorization: SharedAccessSignature ...`` valid for ``<namespace uri>/<path>``
(``bridge.emulator.sas``; the SDK signs one token for the namespace, which covers every path) or
``Authorization: Bearer <jwt>`` from the trusted issuer with the Manage right (Data Owner), as checked by
``bridge.emulator.identity.grants``. Failures
answer Azure's ``<Error><Code>..</Code><Detail>..</Detail></Error>`` with the ``BrokerError``'s
``http_status``, which the SDK maps to ``ClientAuthenticationError`` (401), ``ResourceNotFoundError``
(404), ``ResourceExistsError`` (409) or ``HttpResponseError``. Entries always carry runtime counts, so
``enrich`` needs no special handling.

The handlers run on the emulator's event loop and call the catalog directly; nothing here blocks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from urllib.parse import quote, unquote, urlencode

from bridge.emulator.errors import (
    ArgumentError,
    BrokerError,
    EntityNotFoundError,
    InvalidOperationError,
    UnauthorizedError,
)
from bridge.emulator.http.atom import (
    parse_default_rule,
    parse_description,
    render_entry,
    render_error,
    render_feed,
    render_namespace,
)
from bridge.emulator.http.server import HttpApp, HttpRequest, HttpResponse
from bridge.emulator.identity.grants import AuthPolicy, require
from bridge.emulator.identity.rights import Right
from bridge.emulator.model.catalog import Catalog
from bridge.emulator.model.descriptions import (
    EntityDescription,
    EntityKind,
    QueueDescription,
    RuleDescription,
    RuntimeCounts,
    SubscriptionDescription,
    TopicDescription,
    kind_of,
    path_of,
)

log = logging.getLogger(__name__)

API_VERSION = "2021-05"
ENTRY_TYPE = "application/atom+xml;type=entry;charset=utf-8"
FEED_TYPE = "application/atom+xml;type=feed;charset=utf-8"
ERROR_TYPE = "application/xml; charset=utf-8"
DEFAULT_TOP = 100

_PATH_KIND = {1: EntityKind.QUEUE, 3: EntityKind.SUBSCRIPTION, 5: EntityKind.RULE}
_DESCRIPTION_KIND = {
    1: (QueueDescription, TopicDescription),
    3: (SubscriptionDescription,),
    5: (RuleDescription,),
}
_TITLES = {
    EntityKind.QUEUE: "Queues",
    EntityKind.TOPIC: "Topics",
    EntityKind.SUBSCRIPTION: "Subscriptions",
    EntityKind.RULE: "Rules",
}


def make_admin_app(
    catalog: Catalog,
    auth: AuthPolicy | Mapping[str, str],
    namespace_uri_for_sas: Callable[[HttpRequest], str] | str,
    clock: Callable[[], float],
    *,
    name: str = "local",
) -> HttpApp:
    """The management endpoint over ``catalog``; ``auth`` checks tokens (or is just the SAS keys, name → key).

    ``namespace_uri_for_sas`` is the namespace URI tokens are checked against (e.g. ``sb://127.0.0.1:5700``),
    or a function of the request (e.g. built from its ``Host`` header); ``name`` appears as Atom author.
    """

    started = clock()
    policy = auth if isinstance(auth, AuthPolicy) else AuthPolicy(auth)

    def namespace_uri(request: HttpRequest) -> str:
        if isinstance(namespace_uri_for_sas, str):
            return namespace_uri_for_sas
        return namespace_uri_for_sas(request)

    async def app(request: HttpRequest) -> HttpResponse:
        try:
            segments = _segments(request.path)
            token = request.headers.get("authorization")
            if not token:
                raise UnauthorizedError("MissingToken: the request has no Authorization header.")
            resource = f"{namespace_uri(request).rstrip('/')}/{'/'.join(segments)}"
            if token[:7].lower() == "bearer ":
                token = token[7:].strip()
            require(policy.grant(token, resource, clock()), Right.MANAGE, resource)
            return _Call(catalog, request, segments, name=name, started=started, now=clock()).route()
        except BrokerError as exc:
            if isinstance(exc, UnauthorizedError):
                log.info("management request refused: %s", exc)
            else:
                log.debug("management %s %s -> %s: %s", request.method, request.path, exc.http_status, exc)
            body = render_error(exc.http_status, str(exc))
            return HttpResponse(exc.http_status, {"Content-Type": ERROR_TYPE}, body)

    return app


class _Call:
    """One authorised management request: route it and answer."""

    def __init__(
        self,
        catalog: Catalog,
        request: HttpRequest,
        segments: list[str],
        *,
        name: str,
        started: float,
        now: float,
    ) -> None:
        self.catalog = catalog
        self.name = name
        self.started = started
        self.request = request
        self.segments = segments
        self.now = now
        self.base = f"https://{request.headers.get('host', 'localhost')}"

    def route(self) -> HttpResponse:
        """Dispatch on the path shape (namespace info, entity, list) and the method."""
        segments, lowered, method = self.segments, [s.lower() for s in self.segments], self.request.method
        if lowered == ["$namespaceinfo"]:
            _allow(method, "GET")
            url = f"{self.base}/$namespaceinfo?api-version={API_VERSION}"
            body = render_namespace(self.name, url, self.started, self.now)
            return HttpResponse(200, {"Content-Type": ENTRY_TYPE}, body)
        if len(lowered) == 2 and lowered[0] == "$resources" and lowered[1] in ("queues", "topics"):
            return self._list(EntityKind.QUEUE if lowered[1] == "queues" else EntityKind.TOPIC, None)
        if len(lowered) == 2 and lowered[1] == "subscriptions":
            _check_structure(lowered[:1])
            return self._list(EntityKind.SUBSCRIPTION, segments[0])
        if len(lowered) == 4 and lowered[3] == "rules":
            _check_structure(lowered[:3])
            return self._list(EntityKind.RULE, f"{segments[0]}/Subscriptions/{segments[2]}")
        if len(segments) not in _PATH_KIND:
            raise EntityNotFoundError(f"No management resource at {self.request.path[:200]!r}.")
        _check_structure(lowered)
        path = _catalog_path(segments)
        if method == "GET":
            found = (
                self.catalog.lookup(path)
                if len(segments) == 1
                else self.catalog.get(_PATH_KIND[len(segments)], path)
            )
            return self._entry(found, 200)
        if method == "PUT":
            return self._put()
        if method == "DELETE":
            kind = kind_of(self.catalog.lookup(path)) if len(segments) == 1 else _PATH_KIND[len(segments)]
            self.catalog.delete(kind, path)
            return HttpResponse(200)
        raise InvalidOperationError(f"Method {method} is not allowed on {self.request.path[:200]!r}.")

    def _put(self) -> HttpResponse:
        segments = self.segments
        topic = segments[0] if len(segments) > 1 else None
        subscription = segments[2] if len(segments) > 3 else None
        desc = parse_description(self.request.body, segments[-1], topic, subscription)
        if not isinstance(desc, _DESCRIPTION_KIND[len(segments)]):
            where = self.request.path[:200]
            raise ArgumentError(f"A {type(desc).__name__} cannot be stored at {where!r}.")
        if self.request.headers.get("if-match", "").strip():
            return self._entry(self.catalog.update(desc, self.now), 200)
        default_rule = None
        if isinstance(desc, SubscriptionDescription):
            default_rule = parse_default_rule(self.request.body, desc.topic_name, desc.name)
        return self._entry(self.catalog.create(desc, self.now, default_rule), 201)

    def _list(self, kind: EntityKind, parent: str | None) -> HttpResponse:
        _allow(self.request.method, "GET")
        skip = _count(self.request.query, "$skip", 0)
        top = _count(self.request.query, "$top", DEFAULT_TOP)
        items = self.catalog.list(kind, parent)
        page = items[skip : skip + top]
        here = f"{self.base}{self.request.path}?"
        url = here + urlencode({"$skip": skip, "$top": top, "api-version": API_VERSION})
        next_url = None
        if skip + top < len(items):
            next_url = here + urlencode({"$skip": skip + top, "$top": top, "api-version": API_VERSION})
        entries = [(desc, _url(self.base, desc), _counts(self.catalog, desc)) for desc in page]
        body = render_feed(_TITLES[kind], url, entries, author=self.name, next_url=next_url, now=self.now)
        return HttpResponse(200, {"Content-Type": FEED_TYPE}, body)

    def _entry(self, desc: EntityDescription, status: int) -> HttpResponse:
        body = render_entry(desc, _url(self.base, desc), _counts(self.catalog, desc), author=self.name)
        return HttpResponse(status, {"Content-Type": ENTRY_TYPE}, body)


def _counts(catalog: Catalog, desc: EntityDescription) -> RuntimeCounts | None:
    if isinstance(desc, RuleDescription):
        return None
    return catalog.runtime(kind_of(desc), path_of(desc))


def _url(base: str, desc: EntityDescription) -> str:
    # ``$`` stays as it is (as Azure writes it): the JavaScript SDK reads a name from the entry's ``id``
    # without unescaping it, so ``%24Default`` would reach its users as the rule's name.
    quoted = "/".join(quote(part, safe="$") for part in path_of(desc).split("/"))
    return f"{base}/{quoted}?api-version={API_VERSION}"


def _segments(path: str) -> list[str]:
    # Split before unquoting: the SDK sends a '/' inside an entity name as %2F (a queue may be named
    # ``ns/x-servicebus-transfer/0``), and only the unencoded slashes separate path segments.
    segments = [unquote(part) for part in path.strip("/").split("/") if part]
    if any(not segment.strip() for segment in segments):
        raise ArgumentError("An entity name must not be empty.")
    return segments


def _check_structure(lowered: list[str]) -> None:
    """``t/subscriptions/s/rules/r``: the fixed words must be in place (case-insensitively)."""
    fixed = {1: "subscriptions", 3: "rules"}
    for index, word in fixed.items():
        if len(lowered) > index and lowered[index] != word:
            raise EntityNotFoundError(f"No management resource at '{'/'.join(lowered)[:200]}'.")
    if lowered and lowered[0].startswith("$"):
        raise EntityNotFoundError(f"No management resource at '{'/'.join(lowered)[:200]}'.")


def _catalog_path(segments: list[str]) -> str:
    if len(segments) == 1:
        return segments[0]
    if len(segments) == 3:
        return f"{segments[0]}/Subscriptions/{segments[2]}"
    return f"{segments[0]}/Subscriptions/{segments[2]}/Rules/{segments[4]}"


def _count(query: Mapping[str, str], name: str, default: int) -> int:
    text = query.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or len(text) > 9:
        raise ArgumentError(f"{name}: {text[:20]!r} is not a non-negative integer")
    return int(text)


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise InvalidOperationError(f"Method {method} is not allowed here; use {allowed}.")
