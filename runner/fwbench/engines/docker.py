"""The `docker` engine: each cell runs in its stack's image, one container per cell.

The container gets the shared data read-only at /data and a per-cell directory at /cell where it
writes its record; it runs as the invoking user (so files on the host are theirs), without network,
with the GPU requested when one is present. Exit status and the OOM-killed flag become the row's
status; the container is removed afterwards whatever happened.

A cell of a user's model file (`fwbench run --model FILE`) gets that file read-only at /model/<its name>, and
the data's model-files folder writable at /data/model-files: the first cell of a file makes its inputs there (the
file's own make_inputs, run by a framework the runner may lack), and every later cell, in any image, reads and
checks those bytes (fwbench.core.model_inputs).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from fwbench.engines import CellOutcome, EngineError, cell_settings, write_spec
from fwbench.engines.device import expected_model, hide_gpus, host_has_gpu  # noqa: F401 (also read as docker.host_has_gpu)
from fwbench.engines.device import resolve as resolve_device
from fwbench.engines.watchdog import WATCHDOG_LABEL, remove_containers
from fwbench.core import model_inputs
from fwbench.core.pins import DEFAULT_PIN_SET
from fwbench.core.registry import IMAGE_TEMPLATE
from fwbench.core.spec import CellSpec
from fwbench.engines.docker_client import docker_client

DEFAULT_IMAGE = IMAGE_TEMPLATE  # fwbench/<stack>:<pin set>-<variant>, e.g. fwbench/keras3-jax:paper-2024-gpu
MODEL_DIR = "/model"  # where a --model cell's file is mounted


def cell_mounts(spec: CellSpec, cell_dir: Path) -> tuple[CellSpec, dict[str, dict[str, str]]]:
    """The spec as the container sees it, and its bind mounts: the data read-only, the cell's folder, and for a
    model file's cell the file (read-only) and the data's model-files folder (writable, made here: a folder Docker
    would make for a missing mount source belongs to root)."""
    inner = replace(spec, data_dir="/data")
    volumes = {str(Path(spec.data_dir).resolve()): {"bind": "/data", "mode": "ro"},
               str(cell_dir.resolve()): {"bind": "/cell", "mode": "rw"}}
    if spec.model_file is not None:
        model_path = Path(spec.model_file).resolve()
        inner = replace(inner, model_file=f"{MODEL_DIR}/{model_path.name}")
        volumes[str(model_path)] = {"bind": inner.model_file, "mode": "ro"}
        inputs = Path(spec.data_dir) / model_inputs.INPUTS_FOLDER
        inputs.mkdir(parents=True, exist_ok=True)
        volumes[str(inputs.resolve())] = {"bind": f"/data/{model_inputs.INPUTS_FOLDER}", "mode": "rw"}
    return inner, volumes


def docker_device_request(gpus: int | tuple[int, ...] | None, count: int = 1):
    """The GPU request of a cell's container: exactly its slot's GPUs by NVML index (one, or a data-parallel
    cell's --devices N; the container numbers them from 0); `count` GPUs of Docker's choosing only when the
    host's GPUs cannot be listed. Never every GPU: a framework given more than the cell asked for would use them
    all (the HF Trainer wraps the model in DataParallel)."""
    import docker

    ids = [gpus] if isinstance(gpus, int) else list(gpus or ())
    if not ids:
        return docker.types.DeviceRequest(count=count, capabilities=[["gpu"]])
    return docker.types.DeviceRequest(device_ids=[str(gpu) for gpu in ids], capabilities=[["gpu"]])


class DockerEngine:
    name = "docker"

    def __init__(self, image_template: str = DEFAULT_IMAGE, device: str = "auto", memory: str | None = None,
                 pin_set: str = DEFAULT_PIN_SET, images: dict[str, str] | None = None):
        """device: --device (auto, gpu, cpu). images: stack -> image reference by digest (a release's), used
        instead of the template and pulled when not present."""
        try:
            import docker  # noqa: F401 (only: is the SDK installed?)
        except ImportError:
            raise EngineError("the docker engine needs the Docker SDK: pip install 'fwbench[docker]'") from None
        try:
            self.client = docker_client()
            self.client.ping()
        except Exception as exc:  # docker.errors.DockerException and connection errors
            raise EngineError(f"cannot reach a Docker engine: {exc}") from None
        self.device = resolve_device(device)
        self.use_gpu = self.device == "gpu"
        self.variant = "gpu" if self.use_gpu else "cpu"
        self.image_template = image_template
        self.pin_set = pin_set
        self.memory = memory
        self.references = dict(images or {})
        self._images: dict[str, object] = {}

    def device_model(self, gpu_index: int | None = None) -> str:
        """The device a cell will run on: GPU `gpu_index` (its slot's) on a GPU run, else the CPU."""
        return expected_model(self.device, gpu_index)

    def image_name(self, stack: str) -> str:
        if stack in self.references:
            return self.references[stack]
        return self.image_template.format(stack=stack, variant=self.variant, pin_set=self.pin_set)

    def prepare(self, stack: str, progress=None) -> None:
        """Find the stack's image (never builds one: `progress` is for engines that build); a released image
        (by digest) is pulled when it is not here."""
        import docker

        name = self.image_name(stack)
        try:
            self._images[stack] = self.client.images.get(name)
        except docker.errors.ImageNotFound:
            if stack not in self.references:
                raise EngineError(f"image {name} not found: build it with `docker compose build` (or, from the "
                                  f"repository root, docker build -f images/Dockerfile --build-arg STACK={stack} "
                                  f"--build-arg PIN_SET={self.pin_set} --build-arg VARIANT={self.variant} "
                                  f"-t {name} .; without BuildKit, -f images/Dockerfile.classic)") from None
            try:
                self._images[stack] = self.client.images.pull(name)
            except docker.errors.APIError as exc:
                raise EngineError(f"cannot pull {name}: {exc.explanation or exc}") from None
        except docker.errors.APIError as exc:  # e.g. an invalid reference
            raise EngineError(f"image {name}: {exc.explanation or exc}") from None
        labels = self._images[stack].labels or {}
        if labels.get("io.fwbench.pin-set", self.pin_set) != self.pin_set:
            raise EngineError(f"image {name} holds the {labels['io.fwbench.pin-set']} pin set, not {self.pin_set}")

    def image_variant(self, stack: str) -> str:
        """The variant the stack's image was built as (its io.fwbench.variant label), so the row names the image
        that ran: a GPU image run on the CPU (--image ...-gpu --device cpu) is gpu. Per stack: one run's images
        may differ (an --image template without {variant}). An unlabelled image is what was asked for."""
        if stack not in self._images:
            self.prepare(stack)
        return (self._images[stack].labels or {}).get("io.fwbench.variant") or self.variant

    def image_fields(self, stack: str) -> dict[str, str | None]:
        image = self._images[stack]
        name = self.image_name(stack)
        if "@sha256:" in name:  # started by digest: that is the image's name on its registry
            return {"image_id": image.id, "image_digest": name}
        digests = image.attrs.get("RepoDigests") or []
        return {"image_id": image.id, "image_digest": digests[0] if digests else None}

    def container_environment(self, spec: CellSpec) -> dict[str, str]:
        """Only fwbench's own settings cross into the container, never the host's environment."""
        # Any uid can run the image: caches go to /tmp.
        environment = {**cell_settings(spec), "HOME": "/tmp", "XDG_CACHE_HOME": "/tmp/cache", "KERAS_HOME": "/tmp/keras"}
        if not self.use_gpu:
            # No GPU enters the container, and JAX 0.4.23's CUDA plugin (the paper-2024 gpu image) then fails
            # the cell ("Unable to initialize backend 'cuda'") where later JAX only warns and uses the CPU.
            return hide_gpus(environment)
        return environment

    def run_cell(self, spec: CellSpec, record_path: Path, log_path: Path) -> CellOutcome:
        import docker
        import requests

        if spec.stack not in self._images:
            self.prepare(spec.stack)
        cell_dir = record_path.parent
        inner, volumes = cell_mounts(spec, cell_dir)
        spec_path = write_spec(inner, cell_dir)
        environment = self.container_environment(spec)
        device_requests = [docker_device_request(spec.gpus, spec.devices)] if self.use_gpu else None
        # The watchdog starts first and watches for this token, so a container exists only while something is
        # there to remove it: should this runner die at any point (even between create and start), the
        # watchdog removes every container carrying the token (see engines/watchdog.py).
        token = secrets.token_hex(8)
        watchdog = subprocess.Popen([sys.executable, "-m", "fwbench.engines.watchdog", str(os.getpid()), token],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
        container = None
        timed_out, oom_killed, exit_code = False, False, None
        try:
            try:
                container = self.client.containers.create(
                    self.image_name(spec.stack),
                    entrypoint=["python", "-m", "fwbench.harness.cell"],
                    command=[f"/cell/{spec_path.name}", f"/cell/{record_path.name}"],
                    volumes=volumes, environment=environment, user=f"{os.getuid()}:{os.getgid()}",
                    network_mode="none",
                    device_requests=device_requests, mem_limit=self.memory,
                    # The slot's cores (fwbench.engines.slots); None: every core, as without --parallel.
                    cpuset_cpus=spec.cpu_set,
                    labels={"io.fwbench.cell": spec.cell_id, "io.fwbench.runner-pid": str(os.getpid()),
                            WATCHDOG_LABEL: token})
                container.start()
            except docker.errors.APIError as exc:  # e.g. no GPU driver, a cpuset the host lacks: a failed cell
                log_path.parent.mkdir(parents=True, exist_ok=True)
                log_path.write_text(f"the container could not start: {exc.explanation or exc}\n")
                return CellOutcome(None, False, log_path, record_path, row_fields=self.image_fields(spec.stack))
            try:
                status = container.wait(timeout=spec.timeout_s)
                exit_code = status.get("StatusCode")
            except requests.exceptions.ConnectionError:  # the SDK's read timeout
                timed_out = True
                container.kill(signal="SIGKILL")
            container.reload()
            oom_killed = bool(container.attrs.get("State", {}).get("OOMKilled"))
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_bytes(container.logs(stdout=True, stderr=True))
        finally:
            if container is not None:
                container.remove(force=True)
            else:  # create may have made one before it failed (e.g. a timeout on the answer)
                remove_containers(self.client, token)
            spec_path.unlink(missing_ok=True)
            watchdog.kill()
            watchdog.wait()
        return CellOutcome(exit_code, timed_out, log_path, record_path, oom_killed=oom_killed,
                           row_fields=self.image_fields(spec.stack))
