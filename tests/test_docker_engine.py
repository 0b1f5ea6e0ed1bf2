"""What the docker engine's rows say about the image that ran, without a Docker daemon: a stand-in client
answers the engine's image lookups and a stand-in run_cell writes the record a container would have. The
containers themselves are tested end to end in test_docker_e2e.py and images/check-gpu-image.sh."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from fwbench.engines import matrix
from fwbench.engines import CellOutcome
from fwbench.harness.cell import base_record
from fwbench.core.spec import CellSpec

docker = pytest.importorskip("docker")  # the test extra installs the SDK


class StandInImage:
    def __init__(self, labels: dict[str, str]):
        self.labels = labels
        self.id = "sha256:" + "0" * 64
        self.attrs = {"RepoDigests": []}


class StandInClient:
    def __init__(self, images: dict[str, StandInImage]):
        self.images = self
        self._by_name = images

    def ping(self) -> bool:
        return True

    def get(self, name: str) -> StandInImage:
        if name not in self._by_name:
            raise docker.errors.ImageNotFound(name)
        return self._by_name[name]


def docker_engine(monkeypatch, template: str, images: dict[str, dict[str, str]], device: str = "cpu"):
    """`fwbench run --engine docker --device DEVICE --pin-set paper-2024 --image TEMPLATE` (images: name -> labels;
    for --device gpu the host's GPU, an NVML boundary, is mocked)."""
    from fwbench.engines import device as devices
    from fwbench.engines.docker import DockerEngine

    client = StandInClient({name: StandInImage(labels) for name, labels in images.items()})
    monkeypatch.setattr(docker, "from_env", lambda **kwargs: client)
    monkeypatch.setattr(devices, "host_has_gpu", lambda: device == "gpu")
    engine = DockerEngine(template, device=device, pin_set="paper-2024")
    ran: list[CellSpec] = []

    def run_cell(spec: CellSpec, record_path: Path, log_path: Path) -> CellOutcome:
        ran.append(spec)
        record = {**base_record(spec), "status": "ok", "ms_per_step": 1.0, "step_ms": [1.0]}
        record_path.write_text(json.dumps(record))
        return CellOutcome(0, False, log_path, record_path, row_fields=engine.image_fields(spec.stack))

    monkeypatch.setattr(engine, "run_cell", run_cell)
    return engine, ran


def bert_predict(tmp_path, *stacks: str) -> list[CellSpec]:
    base = CellSpec(stack="", task="", preset="tiny", compile_mode="", data_dir=str(tmp_path / "data"), steps=5,
                    warmup=2, threads=2)
    return matrix.plan(stacks, ["bert-predict"], "tiny", None, 1, base=base)


GPU = {"io.fwbench.variant": "gpu", "io.fwbench.pin-set": "paper-2024"}
CPU = {"io.fwbench.variant": "cpu", "io.fwbench.pin-set": "paper-2024"}


def test_a_gpu_image_run_without_a_gpu_is_recorded_as_the_gpu_image(monkeypatch, tmp_path):
    engine, ran = docker_engine(monkeypatch, "fwbench/{stack}:{pin_set}-gpu",
                                {"fwbench/keras3-jax:paper-2024-gpu": GPU})
    assert engine.variant == "cpu"  # what the absence of a GPU alone would say
    [done] = matrix.run_matrix(bert_predict(tmp_path, "keras3-jax"), tmp_path / "out", engine, resume=False)
    assert (done.row["image_variant"], done.row["pin_set"], done.row["engine"]) == ("gpu", "paper-2024", "docker")
    assert ran[0].image_variant == "gpu"
    assert done.row["device_model"] == engine.device_model()  # the CPU it ran on
    # The variant is part of the cell's identity: --resume finds that row again instead of rerunning the cell.
    [again] = matrix.run_matrix(bert_predict(tmp_path, "keras3-jax"), tmp_path / "out", engine, resume=True)
    assert again.skipped and len(ran) == 1


def test_each_stack_s_rows_name_its_own_image_s_variant(monkeypatch, tmp_path):
    """A template without {variant} can find a gpu image for one stack and a cpu image for another."""
    engine, _ran = docker_engine(monkeypatch, "lab/{stack}:latest",
                                 {"lab/keras3-jax:latest": GPU, "lab/native-torch:latest": CPU,
                                  "lab/keras3-torch:latest": {}})
    stacks = ("keras3-jax", "native-torch", "keras3-torch")
    for stack in stacks:  # as `fwbench run` does before the first cell
        engine.prepare(stack)
    done = matrix.run_matrix(bert_predict(tmp_path, *stacks), tmp_path / "out", engine, resume=False)
    # An unlabelled image is taken to be the variant asked for (cpu: no GPU here).
    assert {r.row["stack"]: r.row["image_variant"] for r in done} == {
        "keras3-jax": "gpu", "native-torch": "cpu", "keras3-torch": "cpu"}


@pytest.mark.parametrize("device, jax_platforms", [("cpu", "cpu"), ("gpu", None)])
def test_jax_is_told_to_use_the_cpu_when_no_gpu_enters_the_container(monkeypatch, tmp_path, device, jax_platforms):
    # JAX 0.4.23's CUDA plugin fails a cell without a GPU instead of falling back (seen in the paper-2024 gpu image).
    engine, _ran = docker_engine(monkeypatch, "fwbench/{stack}:{pin_set}-gpu",
                                 {"fwbench/keras3-jax:paper-2024-gpu": GPU}, device=device)
    [spec] = bert_predict(tmp_path, "keras3-jax")
    environment = engine.container_environment(spec)
    assert environment.get("JAX_PLATFORMS") == jax_platforms
    assert environment["KERAS_BACKEND"] == "jax" and "PATH" not in environment  # fwbench's settings only


def test_a_released_image_runs_by_digest_is_pulled_when_absent_and_named_on_the_row(monkeypatch, tmp_path):
    """`fwbench run --engine docker --release release.json`: the stack's image is the release's, by digest."""
    reference = "127.0.0.1:5000/fwbench/keras3-jax@sha256:" + "ab" * 32
    engine, _ran = docker_engine(monkeypatch, "fwbench/{stack}:{pin_set}-{variant}", {})
    pulled = []

    def pull(name):
        pulled.append(name)
        engine.client._by_name[name] = StandInImage(CPU)
        return engine.client._by_name[name]

    engine.client.pull = pull
    engine.references = {"keras3-jax": reference}
    [done] = matrix.run_matrix(bert_predict(tmp_path, "keras3-jax"), tmp_path / "out", engine, resume=False)
    assert pulled == [reference]
    assert done.row["image_digest"] == reference and done.row["status"] == "ok"


def test_run_with_a_release_that_lacks_the_stack_is_one_clear_error(tmp_path):
    from fwbench.release.record import Release
    from tests.conftest import run_fwbench

    release_path = tmp_path / "release.json"
    release_path.write_text(Release("127.0.0.1:5000", "0.1.0", "abc", "now", []).to_json())
    done = run_fwbench("run", "--engine", "local", "--release", str(release_path), "--stack", "keras3-jax",
                       "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and done.stderr.strip() == "error: --release needs --engine docker"


class StandInContainer:
    """The Docker SDK's container, as far as the engine uses it; `start_error` makes start() fail as the daemon
    does (e.g. no GPU driver)."""

    def __init__(self, client, labels: dict[str, str], start_error: Exception | None):
        self.client, self.labels, self.start_error = client, labels, start_error
        self.id, self.attrs = "c0ffee", {"State": {"OOMKilled": False}}

    def start(self):
        self.client.events.append("start")
        if self.start_error is not None:
            raise self.start_error

    def wait(self, timeout):
        return {"StatusCode": 0}

    def reload(self):
        if self.client.reload_error is not None:
            raise self.client.reload_error

    def logs(self, stdout, stderr):
        return b"log"

    def remove(self, force=False):
        self.client.events.append("remove")
        self.client.existing.remove(self)


class StandInContainers:
    def __init__(self, client):
        self.client = client

    def create(self, image, **kwargs):
        self.client.events.append("create")
        container = StandInContainer(self.client, kwargs["labels"], self.client.start_error)
        self.client.existing.append(container)
        if self.client.create_error is not None:  # the daemon made it, but the answer failed
            raise self.client.create_error
        return container

    def list(self, all=False, filters=None, ignore_removed=False):  # docker-py's signature
        key, _, value = filters["label"].partition("=")
        return [c for c in self.client.existing if c.labels.get(key) == value]


def engine_with_containers(monkeypatch, start_error=None, create_error=None, reload_error=None):
    """The real DockerEngine.run_cell against a stand-in daemon (no Docker here: a true boundary); the watchdog
    process is recorded, not started."""
    import subprocess

    from fwbench.engines.docker import DockerEngine

    client = StandInClient({"fwbench/keras3-jax:paper-2024-cpu": StandInImage(CPU)})
    client.containers, client.events, client.existing = StandInContainers(client), [], []
    client.start_error, client.create_error, client.reload_error = start_error, create_error, reload_error
    monkeypatch.setattr(docker, "from_env", lambda **kwargs: client)

    class Watchdog:
        def __init__(self, argv, **kwargs):
            client.events.append("watchdog")
            self.argv = argv

        def kill(self):
            client.events.append("watchdog stopped")

        def wait(self):
            return 0

    monkeypatch.setattr(subprocess, "Popen", Watchdog)
    return DockerEngine("fwbench/{stack}:{pin_set}-{variant}", device="cpu", pin_set="paper-2024"), client


def test_a_container_that_fails_to_start_is_removed_and_the_cell_is_a_failed_row(monkeypatch, tmp_path):
    error = docker.errors.APIError("could not select device driver", explanation="could not select device driver")
    engine, client = engine_with_containers(monkeypatch, start_error=error)
    [done] = matrix.run_matrix(bert_predict(tmp_path, "keras3-jax"), tmp_path / "out", engine, resume=False)
    assert client.existing == []
    assert client.events == ["watchdog", "create", "start", "remove", "watchdog stopped"]
    assert done.row["status"] == "error" and "could not select device driver" in done.row["error_message"]


def test_a_container_whose_create_answer_failed_is_still_removed(monkeypatch, tmp_path):
    engine, client = engine_with_containers(monkeypatch, create_error=docker.errors.APIError("timeout"))
    [done] = matrix.run_matrix(bert_predict(tmp_path, "keras3-jax"), tmp_path / "out", engine, resume=False)
    assert client.existing == [] and done.row["status"] == "error"


def test_a_daemon_that_stops_answering_mid_cell_still_leaves_a_row_and_the_run_goes_on(monkeypatch, tmp_path):
    """CI once saw Docker stop answering after a memory-starved container: the run ended with no row at all."""
    import requests

    error = requests.exceptions.ConnectionError("Read timed out. (read timeout=60)")
    engine, client = engine_with_containers(monkeypatch, reload_error=error)
    [spec] = bert_predict(tmp_path, "keras3-jax")
    specs = [spec, dataclasses.replace(spec, repeat=1)]
    done = matrix.run_matrix(specs, tmp_path / "out", engine, resume=False)
    assert [d.row["status"] for d in done] == ["error", "error"]
    assert done[0].row["error_type"] == "EngineFailed"
    assert "docker engine failed around the cell: ConnectionError: Read timed out" in done[0].row["error_message"]
    assert client.existing == [] and client.events.count("watchdog stopped") == 2


def test_the_watchdog_runs_before_any_container_exists_and_removes_it_by_token(monkeypatch, tmp_path):
    """A runner that dies right after create (before it could start a watchdog, as it once did) leaves nothing:
    the watchdog was already watching, for the token the container carries."""
    from fwbench.engines import watchdog

    import os

    engine, client = engine_with_containers(monkeypatch)
    matrix.run_matrix(bert_predict(tmp_path, "keras3-jax"), tmp_path / "out", engine, resume=False)
    assert client.events == ["watchdog", "create", "start", "remove", "watchdog stopped"]
    # The watchdog's own removal, for a container left behind by a runner that died.
    orphan = StandInContainer(client, {watchdog.WATCHDOG_LABEL: "t0k3n"}, None)
    other = StandInContainer(client, {watchdog.WATCHDOG_LABEL: "another"}, None)
    client.existing += [orphan, other]
    pid = os.fork()  # a runner that has exited
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert watchdog.main([str(pid), "t0k3n"]) == 0
    assert client.existing == [other]


def test_a_model_file_cell_gets_its_file_read_only_and_a_writable_inputs_folder(tmp_path):
    """`fwbench run --engine docker --model FILE`: the container sees the file at /model/<name> (the spec it reads
    names that path, and the file's SHA-256 is unchanged, so the cell still checks the bytes it imports) and the
    data's model-files folder writable over the read-only data; a published cell gets neither."""
    from fwbench.engines.docker import cell_mounts

    data, cell_dir = tmp_path / "data", tmp_path / "out" / "cell"
    data.mkdir()
    model = tmp_path / "models" / "my_model.py"
    published = CellSpec(stack="keras3-jax", task="bert-predict", preset="tiny", compile_mode="xla",
                         data_dir=str(data), steps=2)
    inner, volumes = cell_mounts(published, cell_dir)
    assert inner.data_dir == "/data" and inner.model_file is None
    assert volumes == {str(data.resolve()): {"bind": "/data", "mode": "ro"},
                       str(cell_dir.resolve()): {"bind": "/cell", "mode": "rw"}}
    assert not (data / "model-files").exists()

    spec = dataclasses.replace(published, task="my_model.py-predict-bs2", model_file=str(model),
                               model_sha256="ab" * 32)
    inner, volumes = cell_mounts(spec, cell_dir)
    assert inner.model_file == "/model/my_model.py" and inner.model_sha256 == spec.model_sha256
    assert volumes[str(model.resolve())] == {"bind": "/model/my_model.py", "mode": "ro"}
    assert volumes[str((data / "model-files").resolve())] == {"bind": "/data/model-files", "mode": "rw"}
    assert volumes[str(data.resolve())]["mode"] == "ro"
    assert (data / "model-files").is_dir()  # made by the runner: Docker would make a missing source root's
