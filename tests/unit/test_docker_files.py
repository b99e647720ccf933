"""``docker/``: the files checked against the code they start (``test_container_*.py`` build and run them).

Every service's command must be a ``bridge`` command with options that command has, every ``BRIDGE_*``
name a settings field, every published or exposed port one the process listens on; and the services are
the processes ``bridge up`` starts (two namespaces, ingress, worker, two beats, a receiver).
"""

from __future__ import annotations

import importlib.util
import re
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import typer.main
import yaml
from pydantic import BaseModel

from bridge.cli.main import app
from bridge.embedded import up
from bridge.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
OVERRIDE = ROOT / "tests" / "integration" / "compose.host-network.yaml"
NOT_SETTINGS = {"BRIDGE_EMULATOR_KEY"}  # read by `bridge emulator` itself (the namespace's own key)
PASS_THROUGH = {"worker", "beat"}  # Celery's own flags are passed on unchanged


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def cli() -> Any:
    """The click group typer builds (typer ships its own click: checked by duck typing)."""
    return typer.main.get_command(app)


def bridge_services() -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose()["services"].items()
        if str(service.get("image", "")).startswith("servicebus-bridge")
    }


def settings_name_exists(env_name: str) -> bool:
    """True when ``BRIDGE_A__B`` names the settings field ``a.b`` (any key below a dict field)."""
    parts = env_name.removeprefix("BRIDGE_").lower().split("__")
    model: Any = Settings
    for index, part in enumerate(parts):
        fields = model.model_fields
        if part not in fields:
            return False
        annotation = fields[part].annotation
        nested = [a for a in getattr(annotation, "__args__", (annotation,)) if isinstance(a, type)]
        models = [a for a in nested if issubclass(a, BaseModel)]
        if index == len(parts) - 1:
            return True
        if getattr(annotation, "__origin__", None) is dict:
            return True
        if not models:
            return False
        model = models[0]
    return True


def test_the_settings_walk_can_say_no() -> None:
    assert settings_name_exists("BRIDGE_PRIMARY__CONNECTION_STRING")
    assert settings_name_exists("BRIDGE_ENTITIES")
    assert not settings_name_exists("BRIDGE_PRIMARY__CONNECTION_STRNG")
    assert not settings_name_exists("BRIDGE_METRICS_PROT")


def test_every_command_and_option_exists() -> None:
    commands = cli().commands
    for name, service in bridge_services().items():
        command = service["command"]
        assert command[0] in commands, f"{name}: bridge {command[0]} does not exist"
        if command[0] in PASS_THROUGH:
            continue
        params = commands[command[0]].params
        options = {opt for p in params for opt in (*p.opts, *p.secondary_opts)}
        for token in command[1:]:
            if token.startswith("--"):
                assert token in options, f"{name}: bridge {command[0]} has no option {token}"
        arguments = [p for p in params if p.param_type_name == "argument"]
        positional = [
            t
            for i, t in enumerate(command[1:])
            if not t.startswith("-")
            and not (i > 0 and command[i].startswith("--") and _takes_value(params, command[i]))
        ]
        assert len(positional) <= len(arguments), f"{name}: too many arguments {positional}"


def _takes_value(params: list[Any], option: str) -> bool:
    for param in params:
        if option in param.opts:
            return not (param.param_type_name == "option" and param.is_flag)
    return False


def test_every_environment_name_is_a_setting() -> None:
    for name, service in compose()["services"].items():
        for env_name in service.get("environment", {}):
            if env_name.startswith("BRIDGE_") and env_name not in NOT_SETTINGS:
                assert settings_name_exists(env_name), f"{name}: {env_name} is not a setting"


def _option(command: list[str], flag: str) -> str | None:
    return command[command.index(flag) + 1] if flag in command else None


def test_every_port_is_one_the_process_listens_on() -> None:
    checked = 0
    for name, service in bridge_services().items():
        command, env = service["command"], service.get("environment", {})
        listening = {_option(command, "--port"), env.get("BRIDGE_METRICS_PORT")} - {None}
        for published in service.get("ports", []):
            container_port = str(published).rsplit(":", 1)[-1]
            assert container_port in listening, f"{name}: publishes {container_port}, listens on {listening}"
            checked += 1
        for exposed in service.get("expose", []):
            assert str(exposed) in listening, f"{name}: exposes {exposed}, listens on {listening}"
            checked += 1
        if command[0] in ("serve", "emulator"):
            assert _option(command, "--host") == "0.0.0.0", f"{name}: must listen beyond its loopback"
        if "BRIDGE_METRICS_PORT" in env:
            assert env.get("BRIDGE_METRICS_HOST") == "0.0.0.0", f"{name}: metrics only on its loopback"
    assert checked >= 5


def test_the_services_are_the_processes_of_bridge_up() -> None:
    services = compose()["services"]
    commands = Counter(
        s["command"][0]
        for s in services.values()
        if "command" in s and s.get("image", "").startswith("servicebus-bridge")
    )
    # bridge up: two namespaces, ingress, a worker, two beats, receivers; plus its private redis-server.
    assert commands["emulator"] == 2
    assert commands["serve"] == 1
    assert commands["worker"] >= 1
    assert commands["beat"] == 2
    assert commands["receive"] >= 1
    assert any(str(s.get("image", "")).startswith("redis") for s in services.values())
    redis_command = next(
        s["command"] for s in services.values() if str(s.get("image", "")).startswith("redis")
    )
    assert redis_command[redis_command.index("--appendonly") + 1] == "yes"
    handler = _option(services["receiver"]["command"], "--handler")
    assert handler == up.RECEIVER_HANDLER


def test_the_dockerfile_builds_what_the_compose_file_runs() -> None:
    text = DOCKERFILE.read_text()
    # Nothing inside the build reaches a package registry: every install is from the wheels made on the host.
    installs = re.findall(r"^[^#\n]*pip install [^\n]*", text, re.M)
    assert installs and all("--no-index --find-links /tmp/wheels" in line for line in installs), installs
    assert "COPY docker/wheels /tmp/wheels" in text
    assert text.count('ENTRYPOINT ["bridge"]') == 2
    assert text.count("HEALTHCHECK ") == 2
    assert text.count("USER bridge") == 2
    stages = set(re.findall(r"^FROM \S+ AS (\S+)$", text, re.M))
    services = compose()["services"].values()
    targets = {
        s["build"]["target"] for s in services if s.get("build", {}).get("dockerfile") == "docker/Dockerfile"
    }
    assert targets <= stages
    assert re.findall(r"^FROM \S+ AS (\S+)$", text, re.M)[-1] == "runtime", "the default target is the bridge"


def test_the_test_override_covers_every_service() -> None:
    """The container test runs the base file with the override on top: a service the override missed
    would join a container network the test's engine does not have (the profiles' services included: the
    container test starts the ``monitoring`` profile too)."""
    override: dict[str, Any] = yaml.safe_load(OVERRIDE.read_text())
    assert set(override["services"]) == set(compose()["services"])
    for name, service in override["services"].items():
        assert service["network_mode"] == "host", name
        for env_name in service.get("environment", {}):
            if env_name.startswith("BRIDGE_") and env_name not in NOT_SETTINGS:
                assert settings_name_exists(env_name), f"{name}: {env_name} is not a setting"
        command = service.get("command", [])
        if "--host" in command:
            assert _option(command, "--host") == "127.0.0.1", f"{name}: traffic stays on loopback"
    assert override["x-test-env"]["BRIDGE_METRICS_HOST"] == "127.0.0.1"


def test_the_ledger_service_runs_the_live_ledger_over_the_beats_journal() -> None:
    services = compose()["services"]
    ledger = services["ledger"]
    # Only when asked (`--profile ledger`), as `bridge up --ledger`
    assert ledger["profiles"] == ["ledger"] and ledger["command"] == ["ledger"]
    # It reads the folder the beats roll into, on the volume they write
    journal = ledger["environment"]["BRIDGE_JOURNAL__DIRECTORY"]
    assert journal == services["beat"]["environment"]["BRIDGE_JOURNAL__DIRECTORY"]
    volume = next(v.split(":")[0] for v in services["beat"]["volumes"] if v.endswith(f":{journal}"))
    assert f"{volume}:{journal}" in ledger["volumes"]
    # Its checkpoint and state on a volume of their own, outside the journal
    folder = ledger["environment"]["BRIDGE_JOURNAL__LIVE_LEDGER__DIRECTORY"]
    assert any(v.endswith(f":{folder}") and not v.startswith(f"{volume}:") for v in ledger["volumes"])
    assert not folder.startswith(journal)
    # and Redis, where `bridge status` and the ingress read its publication
    assert ledger["environment"]["BRIDGE_REDIS_URL"] == services["ingress"]["environment"]["BRIDGE_REDIS_URL"]
    # Its image: the runtime image plus Java and PySpark, installed from wheels made on the host
    assert ledger["build"]["dockerfile"] == "docker/ledger.Dockerfile"
    text = (ROOT / ledger["build"]["dockerfile"]).read_text()
    installs = re.findall(r"^[^#\n]*pip install [^\n]*", text, re.M)
    assert installs and all("--no-index --find-links /tmp/wheels" in line for line in installs), installs
    assert "JAVA_HOME=" in text and "USER bridge" in text
    assert re.findall(r"^FROM \S+ AS (\S+)$", text, re.M)[-1] == "ledger"
    required = (ROOT / "scripts" / "images").read_text()
    assert '["optional-dependencies"]["spark"]' in required  # ledger.txt: the `spark` extra


def _load(path: Path) -> Any:
    """A script of docker/ as a module (docker/ is not a package)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheel(folder: Path, name: str, *requires: str) -> None:
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as archive:
        lines = [f"Name: {name}", "Version: 1.0", *(f"Requires-Dist: {r}" for r in requires)]
        archive.writestr(f"{name}-1.0.dist-info/METADATA", "\n".join(lines) + "\n")


def test_wheels_another_python_3_11_release_needs_are_found(tmp_path: Path) -> None:
    # Given redis's wheel as a 3.11.7 host makes it: async-timeout is needed below 3.11.3 only
    helper = _load(ROOT / "docker" / "wheels_for_311.py")
    _wheel(
        tmp_path,
        "redis",
        'async-timeout>=4.0.3; python_full_version < "3.11.3"',
        'hiredis>=3; extra == "hiredis"',
        'pywin32; sys_platform == "win32"',
        'tomli; python_version < "3.11"',
    )

    # Then the helper names it (not the extra, another platform's or an older Python's requirement)
    assert helper.missing(tmp_path) == ["async-timeout>=4.0.3"]

    # and once its wheel is in the folder, nothing
    _wheel(tmp_path, "async_timeout")
    assert helper.missing(tmp_path) == []


def test_the_compose_prometheus_scrapes_every_bridge_process() -> None:
    config = yaml.safe_load((ROOT / "docker" / "prometheus" / "prometheus.yml").read_text())
    scraped = {
        target.split(":")[0]
        for job in config["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    }
    # The live ledger serves no port: the ingress exports what it publishes in Redis.
    processes = {
        name
        for name, service in bridge_services().items()
        if service["command"][0] not in ("emulator", "ledger")
    }
    assert scraped == processes  # the ingress and every process with BRIDGE_METRICS_PORT
    ingress = next(job for job in config["scrape_configs"] if job["job_name"] == "bridge-ingress")
    assert ingress["authorization"]["credentials_file"] == "/tmp/bridge-api-key"
    service = compose()["services"]["prometheus"]
    assert service["profiles"] == ["monitoring"]
    assert "/tmp/bridge-api-key" in service["command"][0]
