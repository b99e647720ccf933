"""The token issuer as a namespace process runs it: two loopback doors and the federated token files.

``IdentityService.start`` binds the managed-identity door (plain HTTP, ``IDENTITY_ENDPOINT``) and the
OAuth2 door (HTTPS with the namespace's certificate, the authority for client-credential flows), and writes
one federated token per identity under ``<identity dir>/federated/<name>.jwt`` for
``WorkloadIdentityCredential`` (``AZURE_FEDERATED_TOKEN_FILE``). ``info`` is what the namespace prints so
scripts (and ``bridge up``'s env file) can point credentials at it.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import ssl
import time
from pathlib import Path

from bridge.emulator.http.server import serve_http
from bridge.emulator.identity import tokens
from bridge.emulator.identity.directory import load_directory
from bridge.emulator.identity.issuer import MSI_PATH, Issuer
from bridge.emulator.identity.keys import IssuerKey

HEADER_ENV = "BRIDGE_EMULATOR_IDENTITY_HEADER"


class IdentityService:
    """One issuer for the identities of ``identities_file``, signing with ``key``."""

    def __init__(self, key: IssuerKey, identities_file: Path, directory: Path) -> None:
        self.directory = directory
        self.issuer = Issuer(
            key,
            load_directory(identities_file),
            identity_header=os.environ.get(HEADER_ENV) or secrets.token_urlsafe(24),
            clock=time.time,
        )
        self.msi_port = 0
        self.authority_port = 0
        self._servers: list[asyncio.Server] = []

    async def start(self, host: str, msi_port: int, authority_port: int, context: ssl.SSLContext) -> None:
        """Bind both doors and write the federated token files."""
        app = self.issuer.app()
        msi = await asyncio.start_server(lambda r, w: serve_http(r, w, app), host, msi_port)
        oauth = await asyncio.start_server(
            lambda r, w: serve_http(r, w, app), host, authority_port, ssl=context
        )
        self._servers = [msi, oauth]
        self.msi_port = msi.sockets[0].getsockname()[1]
        self.authority_port = oauth.sockets[0].getsockname()[1]
        self._write_federated_tokens()

    def _write_federated_tokens(self) -> None:
        folder = self.directory / "federated"
        folder.mkdir(parents=True, exist_ok=True)
        for identity in self.issuer.directory.identities:
            token = tokens.mint_federated(self.issuer.key, identity, time.time())
            path = folder / f"{identity.name}.jwt"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(token)

    def info(self, host: str) -> dict[str, str]:
        """How credentials reach this issuer (the identity header is a secret, like a SAS key)."""
        return {
            "identity_endpoint": f"http://{host}:{self.msi_port}{MSI_PATH}",
            "identity_header": self.issuer.identity_header,
            "authority": f"https://{host}:{self.authority_port}",
            "tenant_id": self.issuer.key.tenant,
            "federated_tokens": str(self.directory / "federated"),
        }

    def close(self) -> None:
        """Stop both doors."""
        for server in self._servers:
            server.close()
