"""`fwbench doctor`: check the host before hours of GPU time, one line per check with a verdict and a fix.

Most failures of GPU benchmarks in containers are the host's, not the benchmark's: a driver too old for the
wheels' CUDA, NVML that cannot start, Docker without the NVIDIA Container Toolkit ("could not select device
driver"), a framework that does not see the GPU, too little GPU memory or disk. Each check reads one host fact
(NVML, nvidia-smi, the Docker SDK, a framework probe in a subprocess, free disk) and compares it with what the
selected stacks, pin set and preset need (fwbench.core.drivers, fwbench.core.footprint).

Verdicts: ok, warn (the run works, something is missing from it), skip (does not apply here: the GPU checks
on a host without a GPU), FAIL (the run would not work). Exit 0 when nothing FAILs, else 1.

`python -m fwbench.cli.doctor --write` regenerates the driver table in docs/doctor.md.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

import typer

from fwbench.core import drivers, footprint, registry
from fwbench.core.usage import UsageError
from fwbench.engines import EngineError
from fwbench.harness.nvml import nvml_query
from fwbench.cli.common import PIN_SET_HELP, check_pin_set, console

ENGINES = ("local", "current", "docker")
PROBE_TIMEOUT_S = 180
CONTAINER_TIMEOUT_S = 120
TOOLKIT_FIX = ("install the NVIDIA Container Toolkit (nvidia-container-toolkit), then `sudo nvidia-ctk runtime "
               "configure --runtime=docker && sudo systemctl restart docker`")
NVML_FIX = ("the driver does not answer: after a driver upgrade reboot (\"Driver/library version mismatch\"); "
            "otherwise (re)install the NVIDIA driver until `nvidia-smi` works on the host")


@dataclass
class Check:
    name: str
    verdict: str  # ok, warn, skip, FAIL
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.verdict:<4}  {self.name}: {self.detail}"
        return text + (f"\n      fix: {self.fix}" if self.fix and self.verdict in ("FAIL", "warn") else "")


# -- host facts (each read at one boundary, so a test can stand in for it) --------------------------------

@dataclass
class Gpu:
    index: int
    name: str
    free_bytes: int | None  # None: the driver does not say (nvidia-smi prints [N/A], e.g. on some vGPUs and MIG)
    total_bytes: int | None
    energy_error: str | None = None  # None: the total-energy counter answers


@dataclass
class GpuHost:
    driver: str | None = None
    gpus: list[Gpu] = field(default_factory=list)
    source: str = ""  # "NVML", "nvidia-smi" or "" (no GPU found)
    error: str | None = None  # why neither answered although the host has NVIDIA's tools or device nodes


def _decode(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_facts(pynvml) -> tuple[str, list[Gpu]]:
    gpus = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            energy_error = None
        except Exception as exc:  # pynvml.NVMLError_NotSupported on GPUs before Volta and some virtual GPUs
            energy_error = str(exc) or type(exc).__name__
        gpus.append(Gpu(index, _decode(pynvml.nvmlDeviceGetName(handle)), int(memory.free), int(memory.total),
                        energy_error))
    return _decode(pynvml.nvmlSystemGetDriverVersion()), gpus


def read_gpu_host() -> GpuHost:
    """The driver and GPUs from NVML, else from nvidia-smi (without energy: that needs NVML)."""
    found = nvml_query(_nvml_facts)
    if found is not None:
        return GpuHost(found[0], found[1], "NVML")
    if shutil.which("nvidia-smi") is None:
        if Path("/dev/nvidiactl").exists():
            return GpuHost(error="/dev/nvidiactl exists but neither NVML (pynvml) nor nvidia-smi answers")
        return GpuHost()
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.free,memory.total",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GpuHost(error=f"nvidia-smi: {exc}")
    if done.returncode != 0:
        return GpuHost(error=(done.stdout + done.stderr).strip().splitlines()[0] if (done.stdout + done.stderr).strip()
                       else f"nvidia-smi exited {done.returncode}")
    host = GpuHost(source="nvidia-smi")
    for line in done.stdout.strip().splitlines():
        index, name, driver, free, total = [part.strip() for part in line.split(",")]
        host.driver = driver
        host.gpus.append(Gpu(int(index), name, _mib_as_bytes(free), _mib_as_bytes(total),
                             "not read (no pynvml: NVML's energy counter needs it)"))
    return host


def _mib_as_bytes(field: str) -> int | None:
    """An nvidia-smi memory figure (MiB, nounits) in bytes; None where it says none ("[N/A]", "[Not Supported]")."""
    try:
        return int(float(field)) * 2**20
    except ValueError:
        return None


PROBE = r"""
import json, sys, warnings, importlib.util
backend, out = sys.argv[1], {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        if backend == "torch":
            import torch
            out.update(version=torch.__version__, cuda=torch.version.cuda,
                       gpus=torch.cuda.device_count() if torch.cuda.is_available() else 0)
        elif backend == "jax":
            import jax
            devices = jax.devices()
            out.update(version=jax.__version__, platforms=sorted({d.platform for d in devices}),
                       gpus=sum(d.platform == "gpu" for d in devices),
                       cuda=[m for m in ("12", "13") if importlib.util.find_spec(f"jax_plugins.xla_cuda{m}")])
        else:
            import tensorflow as tf
            out.update(version=tf.__version__, cuda=tf.sysconfig.get_build_info().get("cuda_version"),
                       gpus=len(tf.config.list_physical_devices("GPU")))
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
out["warnings"] = [str(w.message).splitlines()[0] for w in caught][-2:]
print("FWBENCH-PROBE " + json.dumps(out))
"""


def framework_view(python: Path, backend: str, env: dict[str, str]) -> dict:
    """The framework's view of the GPU, asked in `python` (a subprocess: a hung CUDA init cannot hang doctor)."""
    try:
        done = subprocess.run([str(python), "-c", PROBE, backend], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, env={**os.environ, **env})
    except subprocess.TimeoutExpired:
        return {"error": f"the probe did not finish in {PROBE_TIMEOUT_S} s (a hung CUDA initialisation?)"}
    except OSError as exc:
        return {"error": str(exc)}
    for line in done.stdout.splitlines():
        if line.startswith("FWBENCH-PROBE "):
            view = json.loads(line.split(" ", 1)[1])
            hints = [text for text in done.stderr.splitlines() if any(
                word in text.lower() for word in ("cuda", "driver", "gpu", "cudnn"))]
            view["stderr"] = hints[-1].strip()[-300:] if hints else ""
            return view
    return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][-300:]}


def framework_present(python: Path, backend: str) -> bool:
    if Path(python) == Path(sys.executable):
        import importlib.util

        return importlib.util.find_spec(backend) is not None
    try:
        done = subprocess.run([str(python), "-c", f"import importlib.util,sys; sys.exit(importlib.util.find_spec("
                               f"{backend!r}) is None)"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def free_disk_gb(path: Path) -> float:
    """Free space on the file system that holds `path` (or its nearest existing parent)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free / footprint.GB


def docker_client():
    import docker

    client = docker.from_env()
    client.ping()
    return client


# -- checks ---------------------------------------------------------------------------------------------

@dataclass
class Selection:
    stacks: list[str]
    engine: str
    pin_set: str
    preset: str
    tasks: list[str]


def check_python(selection: Selection) -> Check:
    version = platform.python_version()
    if sys.version_info < (3, 10):
        return Check("python", "FAIL", f"{version} at {sys.executable}", "fwbench needs Python 3.10 or newer")
    return Check("python", "ok", f"{version} at {sys.executable}")


def check_nvml(host: GpuHost) -> Check:
    if host.error:
        return Check("NVIDIA driver", "FAIL", host.error, NVML_FIX)
    if not host.gpus:
        return Check("NVIDIA driver", "skip", "no NVIDIA GPU on this host: the GPU checks are skipped, cells run "
                                              "on the CPU")
    names = ", ".join(f"{gpu.index}: {gpu.name}" for gpu in host.gpus)
    if host.source != "NVML":
        return Check("NVIDIA driver", "warn", f"{host.driver} via nvidia-smi (NVML not reachable from Python); "
                     f"GPUs {names}", "pip install nvidia-ml-py: without it rows get no NVML memory or energy figures")
    return Check("NVIDIA driver", "ok", f"{host.driver} (NVML); GPUs {names}")


def check_driver(host: GpuHost, selection: Selection) -> Check:
    if not host.gpus or not host.driver:
        return Check("driver vs CUDA wheels", "skip", "no GPU driver to check")
    wheels = [drivers.gpu_wheels(stack, selection.pin_set) for stack in selection.stacks]
    short = [w for w in wheels if not drivers.driver_at_least(host.driver, w.min_driver)]
    if not short:
        need = max((w.min_driver for w in wheels), key=drivers.version_tuple)
        return Check("driver vs CUDA wheels", "ok", f"{host.driver} >= {need} ({selection.pin_set} GPU wheels: "
                     + "; ".join(sorted({w.label() for w in wheels})) + ")")
    worst = max(short, key=lambda w: drivers.version_tuple(w.min_driver))
    names = ", ".join(f"{w.stack} ({w.label()}) needs {w.min_driver}" for w in short)
    fix = f"install NVIDIA driver {worst.min_driver} or newer"
    if selection.pin_set != "paper-2024":
        fix += " (or use --pin-set paper-2024, whose wheels are CUDA 12: driver 525.60.13)"
    return Check("driver vs CUDA wheels", "FAIL", f"driver {host.driver} is too old: {names}", fix)


def check_energy(host: GpuHost) -> Check:
    if not host.gpus:
        return Check("energy counter", "skip", "no GPU")
    missing = [f"GPU {gpu.index} ({gpu.energy_error})" for gpu in host.gpus if gpu.energy_error]
    if missing:
        return Check("energy counter", "warn", "nvmlDeviceGetTotalEnergyConsumption unsupported on "
                     + ", ".join(missing), "rows will have no energy figures; the timings are unaffected")
    return Check("energy counter", "ok", f"total-energy counter answers on {len(host.gpus)} GPU(s)")


def check_gpu_memory(host: GpuHost, selection: Selection) -> Check:
    if not host.gpus:
        return Check("GPU memory", "skip", "no GPU")
    from fwbench.engines.slots import usable_gpus

    usable = set(usable_gpus()) or {gpu.index for gpu in host.gpus}
    gpus = [gpu for gpu in host.gpus if gpu.index in usable] or host.gpus
    cells = [(footprint.cell_gpu_gb(task, selection.preset), task) for task in selection.tasks
             if any(registry.get_stack(s).unsupported_reason(registry.get_task(task).model) is None
                    for s in selection.stacks)]
    if not cells:
        return Check("GPU memory", "skip", "no supported cell selected")
    need, task = max(cells)
    known = [gpu for gpu in gpus if gpu.free_bytes is not None]
    if not known:
        return Check("GPU memory", "warn", f"biggest cell {task} at {selection.preset} needs ~{need:.1f} GB; the driver "
                     f"reports no free memory for GPU {', '.join(str(gpu.index) for gpu in gpus)} ({host.source}: N/A)",
                     "cannot check that it fits: watch the first cells for out-of-memory rows")
    best = max(known, key=lambda gpu: gpu.free_bytes)
    free = best.free_bytes / footprint.GB
    total = "an unknown total" if best.total_bytes is None else f"{best.total_bytes / footprint.GB:.1f} GB"
    detail = (f"biggest cell {task} at {selection.preset} needs ~{need:.1f} GB; GPU {best.index} has "
              f"{free:.1f} GB free of {total}")
    if need > free:
        return Check("GPU memory", "FAIL", detail, "free the GPU (nvidia-smi lists what holds it), use a bigger GPU, "
                     "or a smaller --preset (small fits a 16-24 GB GPU)")
    return Check("GPU memory", "ok", detail + " (a rough estimate)")


def framework_cause(backend: str, view: dict, host: GpuHost, engine: str) -> str:
    """Why a framework that imports sees no GPU on a host that has one: the likeliest cause first."""
    cuda = view.get("cuda")
    if backend == "torch":
        if not cuda:
            return "a CPU-only torch build"
        if int(str(cuda).split(".")[0]) >= 13 and host.driver and not drivers.driver_at_least(
                host.driver, drivers.CUDA_MIN_DRIVER[13]):
            return f"torch's CUDA {cuda} wheels need driver {drivers.CUDA_MIN_DRIVER[13]}, this host has {host.driver}"
    if backend == "jax" and not cuda:
        return "CPU-only jax: no jax-cuda12/13 plugin"
    if backend == "tensorflow" and not cuda:
        return "TensorFlow without CUDA libraries (a CPU build, or tensorflow without [and-cuda])"
    return view.get("stderr") or "; ".join(view.get("warnings") or []) or "the framework gave no reason"


def check_framework(stack: str, python: Path | None, host: GpuHost, selection: Selection) -> Check:
    backend = registry.get_stack(stack).harness_backend
    name = f"{stack}: {backend} GPU view"
    if python is None:
        return Check(name, "skip", f"the local environment is not built yet (it will be on the first run, or "
                     f"`fwbench env build {stack}`); run doctor again after it to check its GPU view")
    if not host.gpus:
        if not framework_present(python, backend):
            return Check(name, "warn", f"no GPU here, and {backend} is not installed in {python}",
                         f"cells of {stack} would fail: use --engine local, or install {backend}")
        return Check(name, "skip", "no GPU on this host")
    view = framework_view(python, backend, registry.get_stack(stack).environment())
    if "error" in view:
        return Check(name, "FAIL", f"{python}: {view['error']}", f"install {stack}'s GPU wheels in {python}")
    if view.get("gpus", 0) > 0:
        return Check(name, "ok", f"{backend} {view.get('version')} sees {view['gpus']} GPU(s) "
                     f"(CUDA {view.get('cuda')})")
    cause = framework_cause(backend, view, host, selection.engine)
    fix = (f"rebuild the GPU environment: remove {python.parents[1]} and run `fwbench env build {stack} --device gpu`"
           if selection.engine == "local" else
           f"install {drivers.gpu_wheels(stack, selection.pin_set).label()} (see docs/doctor.md)")
    return Check(name, "FAIL", f"{backend} {view.get('version')} sees no GPU on a host with {len(host.gpus)}: {cause}",
                 fix)


def python_checks(selection: Selection, host: GpuHost) -> list[Check]:
    """local / current: the environments (uv, disk, built or not) and each framework's view of the GPU."""
    checks = []
    interpreters: dict[str, Path | None] = {}
    if selection.engine == "current":
        interpreters = {stack: Path(sys.executable) for stack in selection.stacks}
    else:
        from fwbench.engines.local import StackEnvironment, fwbench_home, uv_binary

        try:
            checks.append(Check("uv", "ok", str(uv_binary())))
        except EngineError as exc:
            checks.append(Check("uv", "FAIL", str(exc), "pip install -e . (fwbench depends on a pinned uv)"))
        missing = []
        for stack in selection.stacks:
            # A GPU host's cells run in the stack's GPU environment (fwbench.engines.device: --device auto).
            environment = StackEnvironment(stack, selection.pin_set, variant="gpu" if host.gpus else "cpu")
            interpreters[stack] = environment.python if environment.ready else None
            if not environment.ready:
                missing.append(stack)
        need = footprint.environments_gb(missing) if missing else 0.0
        free = free_disk_gb(fwbench_home())
        detail = (f"{free:.1f} GB free under {fwbench_home()}; "
                  + (f"{len(missing)} environment(s) to build, ~{need:.1f} GB ({', '.join(missing)})" if missing
                     else "every environment is built"))
        checks.append(Check("disk for environments", "FAIL" if need > free else "ok", detail,
                            "free disk, or point FWBENCH_HOME at a larger file system"))
    # Side by side: each probe is a process importing its framework and initialising CUDA, and the GPU kit's first
    # window waits for doctor (on the H200, three such probes in a row were most of its 40 s of doctor and imports).
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(len(selection.stacks), 1)) as pool:
        checks += pool.map(lambda stack: check_framework(stack, interpreters[stack], host, selection),
                           selection.stacks)
    return checks


def docker_checks(selection: Selection, host: GpuHost) -> list[Check]:
    """docker: the engine, the NVIDIA Container Toolkit and a GPU inside a container, the images, their disk."""
    from fwbench.engines.docker import DEFAULT_IMAGE

    try:
        client = docker_client()
    except ImportError:
        return [Check("docker", "FAIL", "the Docker SDK is not installed", "pip install 'fwbench[docker]'")]
    except Exception as exc:  # docker.errors.DockerException and connection errors
        return [Check("docker", "FAIL", f"cannot reach a Docker engine: {exc}",
                      "start Docker, and let this user use it (the docker group, or DOCKER_HOST)")]
    info = client.info()
    checks = [Check("docker", "ok", f"Docker {info.get('ServerVersion', '?')}, data root {info.get('DockerRootDir')}")]
    variant = "gpu" if host.gpus else "cpu"
    names = {stack: DEFAULT_IMAGE.format(stack=stack, pin_set=selection.pin_set, variant=variant)
             for stack in selection.stacks}
    present, absent = {}, []
    for stack, name in names.items():
        try:
            present[stack] = client.images.get(name)
        except Exception:  # docker.errors.ImageNotFound
            absent.append(stack)
    if host.gpus:
        checks += toolkit_checks(client, info, names, present)
    else:
        checks.append(Check("NVIDIA Container Toolkit", "skip", "no GPU on this host"))
    for stack in selection.stacks:
        if stack in present:
            size = (present[stack].attrs or {}).get("Size") or 0
            checks.append(Check(f"image {names[stack]}", "ok", f"present ({size / footprint.GB:.1f} GB)"))
        else:
            checks.append(Check(f"image {names[stack]}", "FAIL", "not found", "docker build -f images/Dockerfile "
                                f"--build-arg STACK={stack} --build-arg PIN_SET={selection.pin_set} --build-arg "
                                f"VARIANT={variant} -t {names[stack]} . (or docker compose build)"))
    need = sum(footprint.image_gb(stack, variant) for stack in absent)
    root = info.get("DockerRootDir") or "/var/lib/docker"
    if not Path(root).exists():
        checks.append(Check("disk for images", "skip" if not absent else "warn",
                            f"Docker's data root {root} is not visible here" + (f"; ~{need:.1f} GB of images to build"
                                                                                  if absent else "")))
    else:
        free = free_disk_gb(Path(root))
        checks.append(Check("disk for images", "FAIL" if need > free else "ok",
                            f"{free:.1f} GB free on {root}; ~{need:.1f} GB of images to build",
                            "free disk (docker system prune), or move Docker's data-root"))
    return checks


def toolkit_checks(client, info: dict, names: dict[str, str], present: dict) -> list[Check]:
    runtimes = set(info.get("Runtimes") or {})
    cdi = [device.get("ID", "") for device in info.get("DiscoveredDevices") or [] if "nvidia.com/gpu" in
           str(device.get("ID", ""))]
    if "nvidia" in runtimes or cdi:
        toolkit = Check("NVIDIA Container Toolkit", "ok", "runtime nvidia" if "nvidia" in runtimes
                        else f"CDI devices {', '.join(cdi[:4])}")
    else:
        toolkit = Check("NVIDIA Container Toolkit", "warn", f"no nvidia runtime among {sorted(runtimes)} and no CDI "
                        "GPU devices (a GPU request may still work through the toolkit's hook)", TOOLKIT_FIX)
    if not present:
        return [toolkit, Check("GPU in a container", "skip", "none of the selected images is here to try")]
    import docker

    stack, image = next(iter(present.items()))
    try:
        output = client.containers.run(image.id, ["-L"], entrypoint=["nvidia-smi"], remove=True, network_disabled=True,
                                       device_requests=[docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])])
        listed = _decode(output).strip().splitlines()
        first = listed[0] if listed else "nvidia-smi ran"
        return [toolkit, Check("GPU in a container", "ok", f"{names[stack]}: {first}"
                               + (f" (+{len(listed) - 1})" if len(listed) > 1 else ""))]
    except Exception as exc:  # docker.errors.APIError ("could not select device driver"), ContainerError
        text = str(getattr(exc, "explanation", None) or exc).strip()
        fix = TOOLKIT_FIX if ("could not select device driver" in text or "nvidia-container-cli" in text) else (
            "check `docker run --rm --gpus all IMAGE nvidia-smi -L` on the host; " + TOOLKIT_FIX)
        if toolkit.verdict == "warn":
            toolkit.verdict = "FAIL"
        return [toolkit, Check("GPU in a container", "FAIL", f"nvidia-smi -L in {names[stack]}: {text[:300]}", fix)]


def run_checks(selection: Selection) -> list[Check]:
    host = read_gpu_host()
    checks = [check_python(selection), check_nvml(host), check_driver(host, selection), check_energy(host),
              check_gpu_memory(host, selection)]
    checks += docker_checks(selection, host) if selection.engine == "docker" else python_checks(selection, host)
    return checks


def doctor_cmd(
    stack: Optional[List[str]] = typer.Option(None, "--stack", help="Stack id (repeatable); default: all five."),
    engine: str = typer.Option("local", "--engine", help="local, current or docker."),
    preset: str = typer.Option("tiny", envvar="FWBENCH_PRESET", help="tiny, small or paper."),
    pin_set: Optional[str] = typer.Option(None, "--pin-set", envvar="FWBENCH_PIN_SET", help=PIN_SET_HELP),
    task: Optional[List[str]] = typer.Option(None, "--task", help="Only these tasks (repeatable); default all 12."),
) -> None:
    """Check the host before a run: driver, NVML, GPU memory, Docker's GPU access, each framework's GPU view."""
    if engine not in ENGINES:
        raise UsageError(f"unknown engine '{engine}' (choose from: {', '.join(ENGINES)})")
    check_pin_set(pin_set)
    stacks = [registry.get_stack(s).id for s in stack or registry.STACKS]
    tasks = [registry.get_task(t).id for t in task or registry.TASKS]
    registry.get_preset(preset)
    if engine == "current":
        from fwbench.engines.local import current_engine

        try:
            pin_set = current_engine(pin_set).pin_set
        except EngineError as exc:
            raise UsageError(str(exc)) from None
    selection = Selection(stacks, engine, pin_set or "current", preset, tasks)
    checks = run_checks(selection)
    for check in checks:
        console.print(check.line(), markup=False, highlight=False)
    failed = [check for check in checks if check.verdict == "FAIL"]
    console.print(f"{len(failed)} check(s) FAIL: a run would not work" if failed
                  else "no check FAILs: a run should work", markup=False, highlight=False)
    raise typer.Exit(1 if failed else 0)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_cmd)


# -- docs/doctor.md's generated driver table ----------------------------------------------------------------

DOC = Path(__file__).resolve().parents[3] / "docs" / "doctor.md"
BEGIN, END = "<!-- driver-table:begin (python -m fwbench.cli.doctor --write) -->", "<!-- driver-table:end -->"


def document(text: str) -> str:
    """`text` (docs/doctor.md) with the driver table between its markers regenerated."""
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{drivers.markdown_table()}{END}{tail}"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m fwbench.cli.doctor --write")
    DOC.write_text(document(DOC.read_text()))
    print(f"wrote {DOC}")
