"""End to end with a real Docker engine: build the CPU images, run bench-jax through compose,
run a tiny cell in every other image through the runner's docker engine, and check the failure paths.

Skipped where no Docker engine answers, unless FWBENCH_REQUIRE_DOCKER=1 (CI sets it), which turns
a missing engine into a failure. Images are built with `docker-compose -f compose.cpu.yaml build`
(BuildKit where the docker CLI has it, else images/Dockerfile.classic; layer cache makes a rebuild cheap), for the
pin set FWBENCH_E2E_PIN_SET (default paper-2024: CI's local-engine tests cover `current`, its Docker tests the
published run's versions), and for the stacks FWBENCH_E2E_STACKS (default all five; CI names keras3-jax and one or
more others, .ci/docker-stacks.sh).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fwbench.core import registry, results
from fwbench.engines.docker_client import API_TIMEOUT_S, docker_client
from fwbench.engines.model_files import runs_model_files
from tests.conftest import run_fwbench

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[1]
REQUIRED = os.environ.get("FWBENCH_REQUIRE_DOCKER") == "1"
PIN_SET = os.environ.get("FWBENCH_E2E_PIN_SET", "paper-2024")
SERVICES = {"keras3-tensorflow": "bench-tensorflow", "keras3-jax": "bench-jax", "keras3-torch": "bench-torch",
            "keras2-tensorflow": "bench-keras2", "native-torch": "bench-native"}
# The stacks whose images this run builds and tests (CI picks some: .ci/docker-stacks.sh), keras3-jax always.
BUILT = os.environ.get("FWBENCH_E2E_STACKS", " ".join(SERVICES)).split()
assert set(BUILT) <= set(SERVICES) and "keras3-jax" in BUILT, f"FWBENCH_E2E_STACKS={BUILT}: keras3-jax and {set(SERVICES)}"
# The engine's failure paths run on one image other than keras3-jax's: native-torch's where it is built.
OTHER = "native-torch" if "native-torch" in BUILT else next((s for s in BUILT if s != "keras3-jax"), "keras3-jax")


def model_file_partner(built: list[str]) -> str | None:
    """The image that runs the example model file beside keras3-jax's: native-torch's (the twin) where it is built,
    else another stack that can run a model file (keras2-tensorflow cannot), else None."""
    able = [stack for stack in built if stack != "keras3-jax" and runs_model_files(registry.STACKS[stack])]
    return "native-torch" if "native-torch" in able else next(iter(able), None)


PARTNER = model_file_partner(BUILT)


def needs_image(stack: str) -> None:
    if stack not in BUILT:
        pytest.skip(f"{stack}'s image is not built in this run (FWBENCH_E2E_STACKS={' '.join(BUILT)})")


def compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return []


def docker_ready() -> str | None:
    """None if a Docker engine and a Compose client are usable, else why not."""
    if not compose_command():
        return "no Compose client"
    try:
        docker_client().ping()
    except Exception as exc:  # no SDK, no daemon, no permission
        return f"no Docker engine ({exc.__class__.__name__})"
    return None


@pytest.fixture(scope="module")
def compose_env(tmp_path_factory):
    reason = docker_ready()
    if reason:
        if REQUIRED:
            pytest.fail(f"FWBENCH_REQUIRE_DOCKER=1 but {reason}")
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("compose")
    (work / "data").mkdir()
    (work / "results").mkdir()
    (work / "report").mkdir()
    env = {**os.environ, "FWBENCH_UID": str(os.getuid()), "FWBENCH_GID": str(os.getgid()),
           "FWBENCH_DATA": str(work / "data"), "FWBENCH_RESULTS": str(work / "results"),
           "FWBENCH_REPORT": str(work / "report"), "FWBENCH_PIN_SET": PIN_SET,
           "COMPOSE_PROJECT_NAME": "fwbench-e2e"}
    clear_project(env)
    yield work, env
    clear_project(env)


def clear_project(env) -> None:
    """Remove the test project's containers: an earlier run's (a reused machine keeps them, CI's included, while CI's
    cleanup removes their images) and this module's (`compose run` leaves the services it depends on). Over a
    container whose image is gone, docker-compose 1.29 asks "Continue with the new image? [yN]" and, with no
    terminal to answer, fails `up`. `down` finds containers by the project's label, needing no image."""
    done = compose(env, "down", "--remove-orphans", timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def buildkit_usable(env) -> bool:
    """Whether `docker build` here has BuildKit: the buildx plugin, or DOCKER_BUILDKIT=1 (a 20.10 CLI has it built
    in; CI puts Debian's docker CLI first on PATH)."""
    if env.get("DOCKER_BUILDKIT") == "1":
        return True
    return subprocess.run(["docker", "buildx", "version"], capture_output=True, env=env).returncode == 0


def compose(env, *args, timeout=3600) -> subprocess.CompletedProcess:
    # docker-compose 1.29 gives up on a daemon call after 60 s ("An HTTP request took too long"): CI's `compose run
    # aggregate` did, while the engine committed a multi-GB GPU image beside it. As long as the engine's own wait.
    env = {"COMPOSE_HTTP_TIMEOUT": str(API_TIMEOUT_S), **env}
    if args[:1] == ("build",) and not env.get("FWBENCH_DOCKERFILE"):
        # images/Dockerfile needs BuildKit (its shared uv cache mount); without it, the generated classic twin.
        env = ({**env, "COMPOSE_DOCKER_CLI_BUILD": "1", "DOCKER_BUILDKIT": "1"} if buildkit_usable(env)
               else {**env, "FWBENCH_DOCKERFILE": "images/Dockerfile.classic"})
    return subprocess.run([*compose_command(), "-f", str(ROOT / "compose.cpu.yaml"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def images(compose_env):
    _work, env = compose_env
    built = compose(env, "build", "data", *(SERVICES[stack] for stack in BUILT), timeout=5400)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    return env


def rows_under(path: Path) -> list[dict]:
    return [results.read_row(p) for p in sorted(path.rglob("*.parquet"))]


def test_compose_starts_over_a_container_left_by_an_earlier_run_whose_image_is_gone(compose_env, images):
    """What CI met on a reused machine (the earlier run's data container, its image removed by that run's cleanup):
    the fixture's clearing lets `up` start afresh."""
    _work, env = compose_env
    client = docker_client()
    runner = client.images.get("fwbench/runner:current")
    scratch = client.containers.create(runner.id, command=["true"])
    stale = scratch.commit(repository="fwbench-e2e-stale", tag="runner")  # an image id of its own, to remove
    scratch.remove()
    try:
        stale.tag("fwbench/runner", "current")
        planted = compose(env, "up", "--no-start", "data")
        assert planted.returncode == 0, planted.stdout[-2000:] + planted.stderr[-2000:]
    finally:
        runner.tag("fwbench/runner", "current")
    client.images.remove(stale.id, force=True)
    [container] = client.containers.list(all=True, filters={"label": "com.docker.compose.project=fwbench-e2e"})
    assert container.attrs["Image"] == stale.id  # the earlier run's container, its image gone

    clear_project(env)
    up = compose(env, "up", "data")
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]


def test_compose_up_bench_jax_end_to_end(compose_env, images):
    work, env = compose_env
    up = compose(env, "up", "bench-jax")
    assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-4000:]
    # `up` exits 0 whatever its containers did: the service's own exit status (its runner ended with a traceback
    # once, after writing every row, and nothing said so).
    [container] = compose(env, "ps", "-q", "bench-jax").stdout.split()
    assert docker_client().containers.get(container).attrs["State"]["ExitCode"] == 0, up.stdout[-4000:]
    rows = [r for r in rows_under(work / "results") if r["stack"] == "keras3-jax"]
    assert sorted(r["task"] for r in rows) == sorted(registry.TASKS)
    for row in rows:
        assert row["status"] == "ok", (row["task"], row["error_message"])
        assert row["engine"] == "current" and row["preset"] == "tiny"
        assert json.loads(row["extra"])["image_manifest"]["stack"] == "keras3-jax"  # which image ran it
        assert row["pin_set"] == PIN_SET
        if PIN_SET == "paper-2024":  # the image's libraries are the published ones but for the declared deviations
            assert row["pin_deviations"] and "undeclared" not in row["pin_deviations"], row["pin_deviations"]
    # Results belong to the invoking user, and no partial file is left behind.
    assert all(p.stat().st_uid == os.getuid() for p in (work / "results").rglob("*.parquet"))
    assert not list((work / "results").rglob("*.tmp"))
    aggregate = compose(env, "run", "--rm", "aggregate")
    assert aggregate.returncode == 0, aggregate.stdout[-3000:] + aggregate.stderr[-3000:]
    assert (work / "report" / "report.md").is_file() and (work / "report" / "report.html").is_file()
    compose(env, "down", "--remove-orphans")


@pytest.mark.parametrize("stack", ["native-torch", "keras3-tensorflow", "keras3-torch", "keras2-tensorflow"])
def test_every_other_image_runs_a_tiny_cell_through_the_docker_engine(compose_env, images, stack, tmp_path):
    needs_image(stack)
    work, _env = compose_env
    done = run_fwbench("run", "--engine", "docker", "--stack", stack, "--task", "bert-predict", "--preset", "tiny",
                       "--pin-set", PIN_SET, "--data", str(work / "data"), "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [row] = rows_under(tmp_path)
    assert row["status"] == "ok" and row["engine"] == "docker"
    assert row["image_id"].startswith("sha256:")
    assert (row["pin_set"], row["image_variant"]) == (PIN_SET, "cpu")


def test_compose_runs_a_model_file_given_by_fwbench_model(compose_env, images, tmp_path):
    """`FWBENCH_MODEL=/models/mlp.py docker compose run bench-jax`: the service runs that file's cells (fit and
    predict) from the mounted examples folder, making its inputs in the data's model-files folder (made writable by
    the data service) although the data is mounted read-only."""
    work, env = compose_env
    env = {**env, "FWBENCH_MODEL": "/models/mlp.py", "FWBENCH_RESULTS": str(tmp_path)}
    ran = compose(env, "run", "--rm", "bench-jax")
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-4000:]
    rows = rows_under(tmp_path)
    assert sorted(row["task"] for row in rows) == ["mlp.py-fit-bs32", "mlp.py-predict-bs32"]
    for row in rows:
        assert row["status"] == "ok", (row["task"], row["error_message"])
        assert row["stack"] == "keras3-jax" and row["engine"] == "current" and row["model_file"] == "/models/mlp.py"
    assert list((work / "data" / "model-files").rglob("manifest.json"))


def test_a_model_file_runs_in_the_images_through_the_docker_engine(compose_env, images, tmp_path):
    """`fwbench run --engine docker --model FILE`: keras3-jax's image and another run the example MLP (its twin
    on native-torch, where that image is built) from the mounted file; the first cell makes the inputs in the data's
    model-files folder, the other reads the same bytes, and the twin's parameters are checked against the Keras
    model's."""
    work, _env = compose_env
    if PARTNER is None:
        pytest.skip(f"no image but keras3-jax's that runs a model file in this run (FWBENCH_E2E_STACKS={' '.join(BUILT)})")
    done = run_fwbench("run", "--engine", "docker", "--model", str(ROOT / "examples" / "mlp.py"), "--stack",
                       "keras3-jax", "--stack", PARTNER, "--task", "predict", "--batch", "2", "--steps", "2",
                       "--warmup", "1", "--pin-set", PIN_SET, "--data", str(work / "data"), "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {row["stack"]: row for row in rows_under(tmp_path)}
    assert set(rows) == {"keras3-jax", PARTNER}
    sha256 = hashlib.sha256((ROOT / "examples" / "mlp.py").read_bytes()).hexdigest()
    for stack, row in rows.items():
        assert row["status"] == "ok", (stack, row["error_message"])
        assert row["engine"] == "docker" and row["task"] == "mlp.py-predict-bs2" and row["model_sha256"] == sha256
        assert row["model_file"] == "/model/mlp.py" and row["image_id"].startswith("sha256:")
    assert rows["keras3-jax"]["input_sha256"] == rows[PARTNER]["input_sha256"]
    if PARTNER == "native-torch":
        assert rows["native-torch"]["twin_params_match"] is True
    made = list((work / "data" / "model-files" / sha256[:16]).rglob("*.npy"))
    assert made and all(path.stat().st_uid == os.getuid() for path in made)


def test_docker_engine_timeout_and_oom_leave_status_rows(compose_env, images, tmp_path):
    work, _env = compose_env
    common = ["run", "--engine", "docker", "--stack", OTHER, "--task", "bert-predict", "--pin-set", PIN_SET,
              "--data", str(work / "data")]
    slow = run_fwbench(*common, "--out", str(tmp_path / "slow"), "--inject-fault", "sleep:120", "--timeout", "5")
    assert slow.returncode == 1
    assert [r["status"] for r in rows_under(tmp_path / "slow")] == ["timeout"]
    starved = run_fwbench(*common, "--out", str(tmp_path / "oom"), "--docker-memory", "96m")
    assert starved.returncode == 1
    [row] = rows_under(tmp_path / "oom")
    assert row["status"] == "oom", row["error_message"]
    assert not list(tmp_path.rglob("*.tmp"))
    leftovers = docker_client().containers.list(all=True, filters={"label": "io.fwbench.cell"}, ignore_removed=True)
    assert leftovers == []  # every cell container was removed


def test_images_carry_their_manifest_and_labels(compose_env, images):
    client = docker_client()
    for stack in BUILT:
        image = client.images.get(f"fwbench/{stack}:{PIN_SET}-cpu")
        labels = image.labels
        assert labels["io.fwbench.stack"] == stack and labels["io.fwbench.variant"] == "cpu"
        assert labels["io.fwbench.pin-set"] == PIN_SET
        assert labels["org.opencontainers.image.title"] == f"fwbench-{stack}"  # built from images/Dockerfile
        assert image.attrs["Config"]["User"] == "1000:1000"
        assert image.attrs["Config"]["Entrypoint"] == ["/opt/fwbench/entrypoint.sh"]
        # print() ends the output with a newline: Docker's log stream may drop an unterminated last line.
        read = ["import sys; print(open(sys.argv[1]).read())", labels["io.fwbench.manifest"]]
        manifest = json.loads(client.containers.run(image.id, entrypoint=["python", "-c"], command=read, remove=True))
        lock = (ROOT / "images" / stack / PIN_SET / "requirements-cpu.lock").read_bytes()
        assert manifest["lock_sha256"] == hashlib.sha256(lock).hexdigest()
        assert any(line.startswith("fwbench") for line in manifest["pip_freeze"])


def test_a_docker_cell_is_removed_when_its_runner_is_killed(compose_env, images, tmp_path):
    """SIGKILL leaves the runner no chance to clean up: the watchdog must stop and remove the container."""
    import signal
    import sys
    import time

    work, _env = compose_env
    client = docker_client()
    runner = subprocess.Popen([sys.executable, "-m", "fwbench.cli", "run", "--engine", "docker", "--stack",
                               OTHER, "--task", "bert-predict", "--pin-set", PIN_SET,
                               "--data", str(work / "data"),
                               "--out", str(tmp_path), "--inject-fault", "sleep:300"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def cell_containers():
        # ignore_removed: a container may go between the list and its inspect (hit once here, under load).
        return client.containers.list(all=True, filters={"label": f"io.fwbench.runner-pid={runner.pid}"},
                                      ignore_removed=True)

    try:
        # The daemon may be busy for minutes (CI commits and removes a multi-GB GPU image beside this test; the
        # engine waits for it as long: fwbench.engines.docker_client).
        deadline = time.monotonic() + API_TIMEOUT_S
        while not cell_containers() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert cell_containers(), "the cell container never started"
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=10)
        deadline = time.monotonic() + API_TIMEOUT_S
        while cell_containers() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not cell_containers(), "the cell container outlived its runner"
    finally:
        runner.kill()
        for container in cell_containers():
            container.remove(force=True)
