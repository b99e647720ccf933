"""The result of one send (or ping, or settle) attempt, as the pure core sees it.

Adapters do the I/O and hand the core an ``Outcome``: success, or a failure already reduced to its
``ErrorClass`` and a short description. The description is built by ``describe_error``, which strips
anything that looks like a credential, so an outcome can go to Redis, logs, ``bridge status`` and the
journal without leaking a SAS key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bridge.core.error_classes import Classification, ErrorClass

MAX_ERROR_LENGTH = 300

# Credentials that can appear in SDK messages: connection-string parts and SAS tokens (sig=..., the whole
# "SharedAccessSignature sr=...&sig=...&se=...&skn=..." string), passwords in URLs (redis, proxy) and
# Entra ID tokens and secrets.
_SECRET_PATTERNS = (
    re.compile(r"(SharedAccessKey\s*=\s*)[^;\s]+", re.IGNORECASE),
    re.compile(r"SharedAccessSignature\s+[^\s'\",]+", re.IGNORECASE),
    re.compile(r"(\bsig=)[^&\s'\",]+", re.IGNORECASE),
    re.compile(r"(\w+://[^:/@\s]*:)[^@\s]+(@)"),
    # Entra ID: a JWT (access token, federated token, client assertion), a bearer header, a client secret.
    re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*"),
    re.compile(r"(\bBearer\s+)[^\s'\",]+", re.IGNORECASE),
    re.compile(r"(client_secret\s*[=:]\s*['\"]?)[^&\s'\",;]+", re.IGNORECASE),
)


def scrub_secrets(text: str) -> str:
    """``text`` with credentials replaced by ``***`` (connection-string keys, SAS tokens, URL passwords)."""
    text = _SECRET_PATTERNS[0].sub(r"\1***", text)
    text = _SECRET_PATTERNS[1].sub("SharedAccessSignature ***", text)
    text = _SECRET_PATTERNS[2].sub(r"\1***", text)
    text = _SECRET_PATTERNS[3].sub(r"\1***\2", text)
    text = _SECRET_PATTERNS[4].sub("***", text)
    text = _SECRET_PATTERNS[5].sub(r"\1***", text)
    return _SECRET_PATTERNS[6].sub(r"\1***", text)


def describe_error(exc: BaseException) -> str:
    """A one-line, secret-free description: ``ClassName: message``, cut to ``MAX_ERROR_LENGTH``."""
    message = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    text = scrub_secrets(text)
    if len(text) > MAX_ERROR_LENGTH:
        text = text[: MAX_ERROR_LENGTH - 3] + "..."
    return text


@dataclass(frozen=True)
class Outcome:
    """What happened to one attempt: ``ok``, or the failure's class and a secret-free description.

    ``error_class`` is the *effective* class: the caller applies ``error_classes.escalate`` before handing
    a transient failure to a decision function, so a busy namespace that stays busy counts as an outage.
    """

    ok: bool
    error_class: ErrorClass | None = None
    error: str | None = None
    timeout: bool = False
    entity_missing: bool = False
    address_refused: bool = False
    """The namespace's address refused a TCP connect: the whole namespace was down, not one entity."""

    def __post_init__(self) -> None:
        if self.ok and self.error_class is not None:
            raise ValueError("a successful outcome has no error class")
        if not self.ok and self.error_class is None:
            raise ValueError("a failed outcome needs an error class")

    @classmethod
    def success(cls) -> Outcome:
        """The attempt was accepted by the namespace."""
        return cls(ok=True)

    @classmethod
    def failure(
        cls,
        error_class: ErrorClass,
        error: str = "",
        *,
        timeout: bool = False,
        entity_missing: bool = False,
        address_refused: bool = False,
    ) -> Outcome:
        """A failed attempt of the given class; ``error`` is scrubbed and shortened here too."""
        text = scrub_secrets(error)[:MAX_ERROR_LENGTH] if error else error_class.value
        return cls(
            ok=False,
            error_class=error_class,
            error=text,
            timeout=timeout,
            entity_missing=entity_missing,
            address_refused=address_refused,
        )

    @classmethod
    def from_classification(cls, classification: Classification, error: str) -> Outcome:
        """A failed attempt described by ``error_classes.classify``."""
        return cls.failure(
            classification.error_class,
            error,
            timeout=classification.timeout,
            entity_missing=classification.entity_missing,
            address_refused=classification.address_refused,
        )

    @property
    def failed_with(self) -> ErrorClass:
        """The error class of a failed outcome (``ValueError`` on a success, which has none)."""
        if self.error_class is None:
            raise ValueError("a successful outcome has no error class")
        return self.error_class
