"""Path parameters of the HTTP routes: ``{entity:entity}`` and ``{segment:messages}``.

Starlette's ``path`` convertor (``.*``) stops at a newline, so ``/bad%0Aname/messages`` fell through to 404
instead of reaching the entity rules; ``entity`` takes any character and lets ``validate_entity`` refuse
it (``entity_name_invalid``). ``messages`` is the REST door's last segment in any letter case, as Service
Bus matches it. Importing this module registers both.
"""

from __future__ import annotations

from starlette.convertors import Convertor, register_url_convertor


class EntityConvertor(Convertor[str]):
    """An entity path as sent, any character included: a newline (``%0A``) or ``{`` reaches the entity
    rules (``entity_name_invalid``) instead of falling through to 404."""

    regex = r"[\s\S]+?"

    def convert(self, value: str) -> str:
        """The path text itself."""
        return value

    def to_string(self, value: str) -> str:
        """The path text itself."""
        return value


class MessagesConvertor(Convertor[str]):
    """The ``messages`` segment in any letter case."""

    regex = "[Mm][Ee][Ss][Ss][Aa][Gg][Ee][Ss]"

    def convert(self, value: str) -> str:
        """The segment as sent."""
        return value

    def to_string(self, value: str) -> str:
        """The segment as sent."""
        return value


register_url_convertor("entity", EntityConvertor())
register_url_convertor("messages", MessagesConvertor())
