"""Which of a connection's links answers a request sent to ``$cbs`` or ``<entity>/$management``.

A client reads replies on a receiver link whose source is the request node; the request's ``reply-to``
names that link, and clients name it in one of two ways Service Bus accepts:

- by the link's target address (azure-servicebus for Python; the JavaScript SDK's ``$management`` link,
  whose name and target are the same id);
- by the link's name, the link having no target address (the JavaScript SDK's ``$cbs`` link,
  ``cbs-<uuid>``).

A request whose ``reply-to`` names no such link (or that has none) is answered on the link whose target is
the request link's source address (azure-servicebus's request link uses the same address for both).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proton import Link, Sender


@dataclass(frozen=True, slots=True)
class ReplyLink:
    """One reply link: its name and its target address (if any)."""

    link: Sender
    name: str
    address: str | None


class ReplyLinks:
    """The reply links of one connection, looked up by a request's ``reply-to`` as Service Bus does."""

    def __init__(self) -> None:
        self._links: list[ReplyLink] = []

    def add(self, link: Sender, address: str | None) -> None:
        """Remember a receiver link the client attached to a request node, with its target ``address``."""
        self._links.append(ReplyLink(link, link.name, address or None))

    def remove(self, link: Link) -> None:
        """Forget a detached link."""
        self._links = [r for r in self._links if r.link != link]

    def find(self, reply_to: str | None, request_source: str | None) -> Sender | None:
        """The link to answer on (module docstring), or None when the client attached none that fits."""
        open_links = [r for r in self._links if not r.link.state & Link.LOCAL_CLOSED]
        wanted: list[Callable[[ReplyLink], bool]] = [
            lambda r: bool(reply_to) and r.address == reply_to,
            lambda r: bool(reply_to) and r.name == reply_to,
            lambda r: bool(request_source) and r.address == request_source,
        ]
        for matches in wanted:
            found = [r.link for r in open_links if matches(r)]
            if found:
                return found[-1]  # a re-attach under the same name or address replaces the old link
        return None
