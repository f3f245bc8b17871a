"""Deployment files: docker-compose.yml, Dockerfile and the Kubernetes manifests.

No Docker engine or cluster is needed. The compose file is checked against
the Compose Specification JSON schema as vendored by check-jsonschema
(`vendor.compose-spec`, from SchemaStore / compose-spec), and with
`docker compose config` where the compose plugin is installed. The Kubernetes
manifests are checked against the Kubernetes JSON schemas shipped by
kubernetes-validate. The perfwatch services' command lines run for real, outside
containers, on the embedded broker and SQLite, until their health checks pass.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from perfwatch.config import load_config

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
K8S_DIR = ROOT / "deploy" / "k8s"
STARTUP_TIMEOUT_S = 120.0


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def manifests() -> list[tuple[str, dict[str, Any]]]:
    """(file name, document) of every Kubernetes resource under deploy/k8s."""
    documents = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                documents.append((path.name, document))
    return documents


def resource(kind: str, name: str) -> dict[str, Any]:
    return next(d for _, d in manifests() if d["kind"] == kind and d["metadata"]["name"] == name)


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's `${NAME:-default}` substitution."""

    def substitute(match: re.Match[str]) -> str:
        return variables.get(match.group(1)) or match.group(2) or ""

    return re.sub(r"\$\{([A-Z0-9_]+)(?::-([^}]*))?\}", substitute, value)


# --- docker-compose.yml ---------------------------------------------------------------------


def test_compose_file_follows_the_compose_specification() -> None:
    checker = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(
    shutil.which("docker") is None
    or subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0,
    reason="the docker compose plugin is not installed",
)
def test_compose_file_is_accepted_by_docker_compose() -> None:
    result = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE_FILE), "config", "-q"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_compose_runs_pulsar_postgres_two_processors_and_the_dashboard() -> None:
    document = compose()
    services = document["services"]
    assert set(services) == {"pulsar", "postgres", "perfwatch", "dashboard"}
    assert services["pulsar"]["image"].startswith("apachepulsar/pulsar:")
    assert "standalone" in services["pulsar"]["command"]
    assert services["perfwatch"]["deploy"]["replicas"] == 2
    assert services["perfwatch"]["command"][0] == "serve"
    assert services["dashboard"]["command"][0] == "dashboard"
    for name, service in services.items():
        assert "healthcheck" in service, name
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin the image tag"
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name}: publish on loopback only"
    named = set(document["volumes"])
    used = {v.split(":")[0] for s in services.values() for v in s.get("volumes", [])}
    assert used == named == {"pulsar-data", "postgres-data"}
    for name in ("perfwatch", "dashboard"):
        conditions = services[name]["depends_on"]
        assert conditions == {
            "pulsar": {"condition": "service_healthy"},
            "postgres": {"condition": "service_healthy"},
        }


def test_compose_environment_is_a_valid_perfwatch_configuration() -> None:
    services = compose()["services"]
    password = services["postgres"]["environment"]["POSTGRES_PASSWORD"]
    for name in ("perfwatch", "dashboard"):
        environment = {
            key: interpolate(str(value), {"PERFWATCH_DB_PASSWORD": "s3cret"})
            for key, value in services[name]["environment"].items()
        }
        config = load_config(path=os.devnull, env=environment)
        assert config.broker.url == "pulsar://pulsar:6650"
        assert config.store.url == "postgresql://perfwatch:s3cret@postgres:5432/perfwatch"
    assert interpolate(password, {}) == "perfwatch"  # the documented local default


# --- Dockerfile ---------------------------------------------------------------------------------


def test_dockerfile_is_multi_stage_pinned_and_runs_as_a_user() -> None:
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM\s+(\S+)", text, flags=re.MULTILINE)
    assert len(stages) >= 2
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)", text, flags=re.MULTILINE)
    assert base is not None
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base.group(1)), base.group(1)
    user = re.findall(r"^USER\s+(\S+)", text, flags=re.MULTILINE)
    assert user and user[-1].split(":")[0] not in ("root", "0")
    assert "COPY --from=build" in text
    entrypoint = re.search(r"^ENTRYPOINT\s+(\[.*\])", text, flags=re.MULTILINE)
    assert entrypoint is not None and json.loads(entrypoint.group(1)) == ["perfwatch"]
    ignored = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    # Everything is left out of the build context except what the build copies.
    assert ignored[:4] == ["*", "!pyproject.toml", "!README.md", "!src/"]


# --- Kubernetes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file_name", "document"),
    manifests(),
    ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in manifests()],
)
def test_manifest_matches_the_kubernetes_schema(file_name: str, document: dict[str, Any]) -> None:
    version = kubernetes_validate.latest_version()
    kubernetes_validate.validate(document, version, strict=True)


def test_kustomization_lists_existing_manifests() -> None:
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    for name in kustomization["resources"]:
        assert (K8S_DIR / name).is_file(), name
    assert "secret.example.yaml" not in kustomization["resources"]
    namespaces = {
        d["metadata"].get("namespace") for _, d in manifests() if d["kind"] != "Namespace"
    }
    assert namespaces == {kustomization["namespace"]}


def test_processor_deployment_probes_config_and_secrets() -> None:
    deployment = resource("Deployment", "perfwatch-processor")
    assert deployment["spec"]["replicas"] >= 2
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][0] == "serve"
    metrics_port = next(p for p in container["ports"] if p["name"] == "metrics")
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    env = {e["name"]: e for e in container["env"]}
    assert env["PERFWATCH_BROKER_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "broker-token"
    assert env["PERFWATCH_DB_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "database-password"
    assert "$(PERFWATCH_DB_PASSWORD)" in env["PERFWATCH_STORE_URL"]["value"]
    assert env["PERFWATCH_CONSUMER_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    (config_volume,) = [v for v in pod["volumes"] if "configMap" in v]
    config_map = resource("ConfigMap", config_volume["configMap"]["name"])
    mount = next(m for m in container["volumeMounts"] if m["name"] == config_volume["name"])
    assert container["args"][1:] == ["--config", f"{mount['mountPath']}/perfwatch.toml"]
    # The configured metrics endpoint is the one the probes and the port point at.
    toml = tomllib.loads(config_map["data"]["perfwatch.toml"])
    assert toml["observability"]["metrics_port"] == metrics_port["containerPort"]
    assert toml["observability"]["metrics_host"] == "0.0.0.0"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_configmap_is_a_valid_perfwatch_configuration(tmp_path: Path) -> None:
    config_map = resource("ConfigMap", "perfwatch-config")
    path = tmp_path / "perfwatch.toml"
    path.write_text(config_map["data"]["perfwatch.toml"])
    config = load_config(path, env={"PERFWATCH_STORE_URL": "postgresql://u:p@db:5432/perfwatch"})
    assert config.broker.url is not None and config.broker.url.startswith("pulsar://")
    assert config.observability.metrics_port == 9464


def test_dashboard_deployment_and_service() -> None:
    deployment = resource("Deployment", "perfwatch-dashboard")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "dashboard"
    port = container["args"][container["args"].index("--port") + 1]
    assert {"name": "http", "containerPort": int(port), "protocol": "TCP"} in container["ports"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    service = resource("Service", "perfwatch-dashboard")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


# --- the compose services' command lines, run outside containers ---------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def local_command(service: dict[str, Any], ports: dict[str, int]) -> list[str]:
    """The service's command with container-only values made local: loopback, free ports."""
    command = list(service["command"])
    for i, argument in enumerate(command):
        if argument == "0.0.0.0":
            command[i] = "127.0.0.1"
        elif argument in ports:
            command[i] = str(ports[argument])
    return command


def local_healthcheck(service: dict[str, Any], ports: dict[str, int]) -> list[str]:
    test = service["healthcheck"]["test"]
    assert test[0] == "CMD"
    arguments = [sys.executable if test[1] == "python" else test[1], *test[2:]]
    for container_port, local_port in ports.items():
        arguments = [a.replace(f":{container_port}/", f":{local_port}/") for a in arguments]
    return arguments


def wait_healthy(healthcheck: list[str], process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{process.args} exited with {process.returncode}:\n{log.read_text()}")
        if subprocess.run(healthcheck, capture_output=True, timeout=30).returncode == 0:
            return
        time.sleep(0.5)
    pytest.fail(f"{process.args} not healthy after {STARTUP_TIMEOUT_S:.0f} s:\n{log.read_text()}")


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; each is stopped with SIGTERM (its own pid) at the end."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_compose_perfwatch_services_become_healthy_and_work_together(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    services = compose()["services"]
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PERFWATCH_") and key != "XDG_DATA_HOME"
    }
    # The compose environment, with the container hosts replaced by local ones.
    environment.update(
        {
            key: str(value)
            for key, value in services["perfwatch"]["environment"].items()
            if key not in ("PERFWATCH_BROKER_URL", "PERFWATCH_BROKER_ADMIN_URL")
        }
    )
    environment["PERFWATCH_STORE_URL"] = f"sqlite:///{tmp_path / 'state.db'}"
    environment["XDG_DATA_HOME"] = str(tmp_path / "data")
    embedded_dir = tmp_path / "broker"
    ports = {"9464": free_port(), "8050": free_port()}
    # the command installed beside this interpreter, on PATH or not
    executable = Path(sys.executable).with_name("perfwatch")
    assert executable.exists(), "perfwatch is not installed (pip install -e .)"
    perfwatch = [str(executable)]

    for name in ("perfwatch", "dashboard"):
        service = services[name]
        log = tmp_path / f"{name}.log"
        command = [*perfwatch, *local_command(service, ports), "--embedded-dir", str(embedded_dir)]
        with log.open("wb") as output:
            process = subprocess.Popen(
                command, env=environment, stdout=output, stderr=subprocess.STDOUT, cwd=tmp_path
            )
        started.append(process)
        wait_healthy(local_healthcheck(service, ports), process, log)

    # Records published now reach the processor; the dashboard shows the verdict.
    records = tmp_path / "records.jsonl"
    lines = []
    for i in range(40):
        value = 100.0 if i < 25 else 140.0
        lines.append(
            json.dumps(
                {
                    "schema": "perfwatch.record/v1",
                    "test": "deploy.smoke",
                    "run_id": f"run-{i:02d}",
                    "commit": f"{i:040x}",
                    "branch": "main",
                    "timestamp": f"2024-05-{1 + i // 24:02d}T{i % 24:02d}:00:00Z",
                    "metrics": {"latency_ms": value + (i % 3) * 0.5},
                }
            )
        )
    records.write_text("\n".join(lines) + "\n")
    publish = subprocess.run(
        [*perfwatch, "publish", str(records)],
        env={**environment, "PERFWATCH_BROKER_EMBEDDED_DIR": str(embedded_dir)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert publish.returncode == 0, publish.stdout + publish.stderr
    dashboard = f"http://127.0.0.1:{ports['8050']}"
    deadline = time.monotonic() + 60
    verdicts: list[dict[str, Any]] = []
    kinds: set[str] = set()
    while time.monotonic() < deadline and "incident.opened" not in kinds:
        with urllib.request.urlopen(f"{dashboard}/api/verdicts", timeout=10) as response:
            verdicts = json.load(response)["verdicts"]
        kinds = {v["verdict"]["kind"] for v in verdicts}
        time.sleep(0.5)
    # the step is found, settles (confirmed) and alerts as its commit's incident
    assert {"change_point.detected", "change_point.confirmed", "incident.opened"} <= kinds
    assert {v["facts"]["test"] for v in verdicts} == {"deploy.smoke"}
    assert {
        v["verdict"]["change_point"]["index"] for v in verdicts if "change_point" in v["verdict"]
    } == {25}
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['9464']}/metrics", timeout=10) as r:
        assert re.search(rb"^perfwatch_records_processed_total 40\.0$", r.read(), re.MULTILINE)
    # The compose file asks for JSON logs: every line, the dashboard's web server's too.
    assert services["dashboard"]["environment"]["PERFWATCH_OBSERVABILITY_LOG_FORMAT"] == "json"
    log_lines = (tmp_path / "dashboard.log").read_text().splitlines()
    assert "uvicorn.error" in {json.loads(line)["logger"] for line in log_lines}


# --- the configuration reference in docs/deploy.md ------------------------------------------


def documented_defaults() -> dict[str, str]:
    """`key -> default` cells of the configuration table in docs/deploy.md."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    text = text[text.index("## Configuration reference") :]
    text = text[: text.index("\n## ", 1)]
    rows = re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \| ([^|]+) \|", text, flags=re.MULTILINE)
    return {key: cell.strip() for key, cell in rows}


def toml_text(value: Any) -> str:
    if value is None or value == "":
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        return f"`{json.dumps(list(value))}`"
    return f"`{value}`"


def test_configuration_reference_lists_every_key_with_its_default() -> None:
    from perfwatch.config import SECTIONS, Config
    from perfwatch.detectors.edivisive import EDivisiveParams

    config = Config()
    expected = {}
    for section, model in SECTIONS.items():
        values = getattr(config, section)
        for name in model.model_fields:
            expected[f"{section}.{name}"] = toml_text(getattr(values, name))
    for name, value in EDivisiveParams().to_dict().items():
        expected[f"analyzer.{name}"] = toml_text(value)
    documented = documented_defaults()
    assert sorted(documented) == sorted(expected)
    for key, text in expected.items():
        if text == "unset":
            assert documented[key].startswith("*("), key
        else:
            assert documented[key] == text, key


def test_configuration_reference_rows_come_from_the_declarations() -> None:
    """docs/deploy.md's settings rows are those scripts/config_reference.py writes."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "config_reference.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
