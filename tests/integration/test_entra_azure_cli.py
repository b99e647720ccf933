"""The ``azure_cli`` credential against the real Azure CLI, signed in to the local token issuer.

azure-identity's ``AzureCliCredential`` runs ``az account get-access-token --output json --resource
https://servicebus.azure.net [--tenant ...]``. This test installs the real ``azure-cli`` from PyPI once per
machine, in a virtualenv of its own in the test cache (``<cache>/azure-cli-2.91.0``, about 400 MB; a fresh
machine needs PyPI once and a few minutes), puts an ``az`` on ``PATH`` that starts it the way its own
entry script does (``python -m azure.cli``), and signs it in to the local issuer as a service principal:

- ``az config set core.instance_discovery=false``: without it msal asks ``login.microsoftonline.com``
  whether the local authority is known (the Azure CLI's setting for Azure Stack);
- ``az cloud register --skip-endpoint-discovery --endpoint-active-directory <issuer>`` and ``az cloud set``:
  a custom cloud whose authority is the issuer (the resource-manager endpoint is required but never called);
- ``az login --service-principal ... --allow-no-subscriptions --skip-subscription-discovery``: a tenant-level
  account, without the resource-manager calls that list subscriptions.

Then the bridge's ``azure_cli`` credential (``bridge/servicebus/credentials.py``) is used unmodified: a
message goes through the local Service Bus with local auth disabled. ``REQUESTS_CA_BUNDLE`` makes the CLI
trust the issuer's certificate. Slow (``-m slow``): the first install takes minutes and each ``az`` start
several seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage

from bridge.servicebus.credentials import service_bus_client
from bridge.settings import NamespaceSettings
from tests.integration.entra_support import SECRETS, client_id, entra_namespace
from tests.integration.rest_clients import _install, cache_dir

AZURE_CLI = "azure-cli==2.91.0"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def azure_cli_python() -> Path:
    """The Python of a virtualenv holding azure-cli (installed once per machine into the test cache)."""
    name = "azure-cli-2.91.0"
    staging = cache_dir() / f"{name}.partial"
    python = cache_dir() / name / "bin" / "python"
    # Made in place and renamed: its scripts name their own path, so only ``bin/python -m azure.cli`` is used.
    pip = [str(staging / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    build = [[sys.executable, "-m", "venv", str(staging)], [*pip, "--no-compile", AZURE_CLI]]
    _install(name, python, build, staging)
    return python


SLOW_START = 12
"""Seconds the ``az`` the credential runs waits before starting: what the CLI took to answer on this loaded
2-CPU host (12.5 s), more than azure-identity's default process timeout of 10 s."""


def write_az(folder: Path, python: Path) -> Path:
    """An ``az`` on ``PATH`` that starts the installed CLI as its own entry script does; ``az account``
    (what the credential runs) starts ``SLOW_START`` seconds late, as on a busy host."""
    folder.mkdir(parents=True, exist_ok=True)
    az = folder / "az"
    delay = f'[ "$1" = account ] && sleep {SLOW_START}\n'
    az.write_text(f'#!/bin/sh\n{delay}exec "{python}" -m azure.cli "$@"\n')
    az.chmod(0o755)
    return folder


def az(*args: str) -> str:
    """Run the CLI with the test's environment; fails the test with its output if it fails."""
    done = subprocess.run(["az", *args], capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, f"az {args[0]} {args[1]}: {done.stdout[-1500:]}{done.stderr[-1500:]}"
    return done.stdout


def test_the_azure_cli_credential_signs_in_through_the_real_az(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = azure_cli_python()
    bin_dir = write_az(tmp_path / "bin", python)
    ns = entra_namespace(tmp_path / "ns")  # local auth disabled: only Entra ID tokens get in
    try:
        endpoints = ns.endpoints
        assert endpoints is not None and endpoints.authority and endpoints.tenant_id
        for key in [k for k in os.environ if k.startswith(("AZURE_", "IDENTITY_", "MSI_"))]:
            monkeypatch.delenv(key)  # only the CLI may provide the token
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path / "azure-config"))
        monkeypatch.setenv("AZURE_CORE_COLLECT_TELEMETRY", "false")
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", ns.certificate)
        # Given the real az signed in to the local issuer as the Data Owner service principal
        az("config", "set", "core.instance_discovery=false")
        az(
            "cloud", "register", "--name", "BridgeLocal", "--skip-endpoint-discovery",
            "--endpoint-active-directory", endpoints.authority,
            "--endpoint-active-directory-resource-id", "https://management.core.windows.net/",
            "--endpoint-resource-manager", "https://management.invalid/",
        )  # fmt: skip
        az("cloud", "set", "--name", "BridgeLocal")
        login = az(
            "login", "--service-principal", "--username", client_id("owner"), "--password", SECRETS["owner"],
            "--tenant", endpoints.tenant_id, "--allow-no-subscriptions", "--skip-subscription-discovery",
        )  # fmt: skip
        assert '"type": "servicePrincipal"' in login
        # When the bridge's azure_cli credential is used unmodified for a namespace, with a slow az
        settings = NamespaceSettings(
            fully_qualified_namespace="localhost",
            credential="azure_cli",
            tenant_id=endpoints.tenant_id,
            custom_endpoint_address=f"sb://localhost:{ns.port}",
            certificate=Path(ns.certificate),
        )
        with service_bus_client(settings, retry_total=0) as client:
            with client.get_queue_sender("cli") as sender:
                sender.send_messages(ServiceBusMessage("through az"))
            with client.get_queue_receiver("cli", max_wait_time=10) as receiver:
                got = receiver.receive_messages(max_message_count=1, max_wait_time=10)
                # Then the message went through on the token az fetched
                assert [str(m) for m in got] == ["through az"]
                receiver.complete_message(got[0])
    finally:
        ns.close()
