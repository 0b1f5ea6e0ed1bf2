"""`fwbench doctor` and the facts it checks against (fwbench.core.drivers, fwbench.core.footprint).

There is no GPU, NVML, Docker daemon or NVIDIA Container Toolkit where these tests run: every host fact is
stood in for at its boundary, as the docstrings say: a fake `pynvml` module in sys.modules (NVML), a fake
`nvidia-smi` (shutil.which and subprocess.run), a fake Docker client (doctor.docker_client), the framework
probe's answer (doctor.framework_view) and shutil.disk_usage. The last tests run the real command and the
real probe on this CPU machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import docker
import pytest
from typer.testing import CliRunner

from fwbench.cli import doctor
from fwbench.cli.commands import app
from fwbench.core import drivers, footprint, registry

ROOT = Path(__file__).resolve().parents[1]
H100 = 80 * 10**9


class FakeNvml:
    """pynvml as a host with these GPUs answers it: (name, free bytes, energy counter supported)."""

    class NVMLError(Exception):
        pass

    def __init__(self, driver="580.65.06", gpus=(("NVIDIA H100 80GB HBM3", H100 - 10**9, True),), init_error=None):
        self.driver, self.gpus, self.init_error = driver, list(gpus), init_error

    def nvmlInit(self):
        if self.init_error:
            raise self.NVMLError(self.init_error)

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return self.gpus[handle][0]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(free=self.gpus[handle][1], total=H100)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.gpus[handle][2]:
            raise self.NVMLError("Not Supported")
        return 123456


@pytest.fixture
def gpu_host(monkeypatch):
    """Install a fake NVML (and no nvidia-smi); returns a setter for its GPUs and driver."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def install(**kwargs):
        monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(**kwargs))
        return doctor.read_gpu_host()

    return install


def selection(stacks=("native-torch",), engine="current", pin_set="current", preset="tiny", tasks=None):
    return doctor.Selection(list(stacks), engine, pin_set, preset, list(tasks or registry.TASKS))


# -- the driver table ------------------------------------------------------------------------------------

def test_cuda_major_and_minimum_driver_come_from_the_gpu_locks():
    """torch 2.14 locks CUDA 13 (driver 580); every other current wheel and every paper-2024 wheel is CUDA 12."""
    for stack in registry.STACKS:
        for pin_set in ("current", "paper-2024"):
            wheels = drivers.gpu_wheels(stack, pin_set)
            lock = (ROOT / "images" / stack / pin_set / "requirements-gpu.lock").read_text()
            assert f"\n{wheels.framework}=={wheels.version}" in "\n" + lock
            expected = 13 if (pin_set, wheels.framework) == ("current", "torch") else 12
            assert wheels.cuda_major == expected, (stack, pin_set, wheels)
            assert wheels.min_driver == {12: "525.60.13", 13: "580"}[expected]


def test_a_lock_that_does_not_say_its_cuda_is_refused(tmp_path):
    """A lock refresh that drops the CUDA runtime, or mixes majors, cannot silently change the table."""
    folder = tmp_path / "native-torch" / "current"
    folder.mkdir(parents=True)
    (folder / "requirements-gpu.lock").write_text("torch==9.0 \\\n    --hash=sha256:00\n")
    with pytest.raises(drivers.LockError, match="no nvidia-cuda-runtime"):
        drivers.gpu_wheels("native-torch", "current", tmp_path)
    (folder / "requirements-gpu.lock").write_text("torch==9.0\nnvidia-cuda-runtime-cu12==13.0.1\n")
    with pytest.raises(drivers.LockError, match="different CUDA majors"):
        drivers.gpu_wheels("native-torch", "current", tmp_path)
    jax = tmp_path / "keras3-jax" / "current"
    jax.mkdir(parents=True)
    (jax / "requirements-gpu.lock").write_text("jax==1.0\njax-cuda12-plugin==1.0\nnvidia-cuda-runtime==13.0.1\n")
    with pytest.raises(drivers.LockError, match="plugin"):
        drivers.gpu_wheels("keras3-jax", "current", tmp_path)


def test_docs_doctor_md_has_the_current_driver_table():
    text = doctor.DOC.read_text()
    assert doctor.document(text) == text, "docs/doctor.md is stale: run `python -m fwbench.cli.doctor --write`"


# -- each check, both outcomes ----------------------------------------------------------------------------

def test_driver_575_fails_torch_cuda13_and_names_580(gpu_host):
    """NVML reports driver 575: the current torch wheels (CUDA 13) need 580; paper-2024's (CUDA 12) run."""
    host = gpu_host(driver="575.57.08")
    check = doctor.check_driver(host, selection(("native-torch", "keras3-jax")))
    assert check.verdict == "FAIL" and "580" in check.detail and "native-torch" in check.detail
    assert "keras3-jax" not in check.detail and "paper-2024" in check.fix
    assert doctor.check_driver(host, selection(pin_set="paper-2024")).verdict == "ok"
    assert doctor.check_driver(gpu_host(driver="580.65.06"), selection()).verdict == "ok"


def test_nvml_init_failure_is_a_fail_with_nvidia_smis_words(gpu_host, monkeypatch):
    """NVML cannot start (fake pynvml raises) and the fake nvidia-smi prints the classic mismatch."""
    monkeypatch.setattr(doctor.shutil, "which", lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None)
    monkeypatch.setattr(doctor.subprocess, "run", lambda *a, **k: SimpleNamespace(
        returncode=18, stdout="Failed to initialize NVML: Driver/library version mismatch\n", stderr=""))
    host = gpu_host(init_error="Driver/library version mismatch")
    check = doctor.check_nvml(host)
    assert check.verdict == "FAIL" and "Failed to initialize NVML" in check.detail and "reboot" in check.fix
    assert doctor.check_nvml(gpu_host()).verdict == "ok"


def test_no_gpu_skips_every_gpu_check(monkeypatch):
    """No pynvml, no nvidia-smi, no /dev/nvidiactl: a CPU host."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    monkeypatch.setattr(doctor.Path, "exists", lambda self: False)
    host = doctor.read_gpu_host()
    checks = [doctor.check_nvml(host), doctor.check_driver(host, selection()), doctor.check_energy(host),
              doctor.check_gpu_memory(host, selection(preset="paper"))]
    assert [check.verdict for check in checks] == ["skip"] * 4


def fake_nvidia_smi(monkeypatch, gpus: str) -> None:
    """No pynvml; an nvidia-smi (shutil.which and subprocess.run) that prints these query lines."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(doctor.shutil, "which", lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None)

    def run(command, **kwargs):
        indices = "".join(line.split(",")[0] + "\n" for line in gpus.splitlines())
        return SimpleNamespace(returncode=0, stdout=indices if "--query-gpu=index" in command else gpus, stderr="")

    monkeypatch.setattr(doctor.subprocess, "run", run)


def test_nvidia_smi_memory_not_available_is_unknown_not_a_crash(monkeypatch):
    """nvidia-smi prints [N/A] for memory on some virtual GPUs and MIG instances: unknown, and the checks go on."""
    fake_nvidia_smi(monkeypatch, "0, GRID A100D-1-10C, 550.54.15, [N/A], [N/A]\n"
                                 "1, NVIDIA A10G, 550.54.15, 22000, [Not Supported]\n")
    host = doctor.read_gpu_host()
    assert [(gpu.free_bytes, gpu.total_bytes) for gpu in host.gpus] == [(None, None), (22000 * 2**20, None)]
    check = doctor.check_gpu_memory(host, selection(preset="tiny"))
    assert check.verdict == "ok" and "GPU 1 has 23.1 GB free of an unknown total" in check.detail
    fake_nvidia_smi(monkeypatch, "0, GRID A100D-1-10C, 550.54.15, [N/A], [N/A]\n")
    check = doctor.check_gpu_memory(doctor.read_gpu_host(), selection(preset="tiny"))
    assert check.verdict == "warn" and "no free memory for GPU 0" in check.detail
    monkeypatch.setattr(doctor, "framework_view", lambda python, backend, env: {"version": "2.2.1", "cuda": "12.1",
                                                                                 "gpus": 1})
    result = CliRunner().invoke(app, ["doctor", "--engine", "current", "--stack", "native-torch", "--pin-set",
                                      "paper-2024"])
    assert result.exit_code == 0, result.output
    assert "warn  GPU memory" in result.output


def test_energy_counter_unsupported_is_a_warn(gpu_host):
    host = gpu_host(gpus=[("Tesla T4", H100, True), ("GRID vGPU", H100, False)])
    check = doctor.check_energy(host)
    assert check.verdict == "warn" and "GPU 1" in check.detail and "GPU 0" not in check.detail
    assert doctor.check_energy(gpu_host()).verdict == "ok"


def test_too_little_gpu_memory_for_paper_gemma_fit_fails(gpu_host):
    """16 GB free cannot hold Gemma 7B's bf16 weights (17 GB) plus a fit step; 79 GB free can."""
    assert 20 < footprint.cell_gpu_gb("gemma-fit", "paper") < 30
    assert footprint.cell_gpu_gb("bert-predict", "tiny") < 3
    small = gpu_host(gpus=[("NVIDIA A10G", 16 * 10**9, True)])
    check = doctor.check_gpu_memory(small, selection(preset="paper", tasks=["gemma-fit"]))
    assert check.verdict == "FAIL" and "gemma-fit" in check.detail and "--preset" in check.fix
    assert doctor.check_gpu_memory(small, selection(preset="small", tasks=["gemma-fit"])).verdict == "ok"
    assert doctor.check_gpu_memory(gpu_host(), selection(preset="paper")).verdict == "ok"
    # Keras 2 has no Gemma: its selection has no Gemma cell to fit.
    keras2 = doctor.check_gpu_memory(small, selection(("keras2-tensorflow",), preset="paper", tasks=["gemma-fit"]))
    assert keras2.verdict == "skip"


def test_framework_that_sees_no_gpu_fails_with_the_likely_cause(gpu_host, monkeypatch):
    """The probe's answers are stood in for: torch CUDA 13 on driver 575, CPU-only jax, a torch that sees one."""
    host = gpu_host(driver="575.57.08")
    views = {"torch": {"version": "2.14.1", "cuda": "13.0", "gpus": 0, "warnings": [], "stderr": ""},
             "jax": {"version": "0.10.2", "cuda": [], "gpus": 0, "platforms": ["cpu"], "warnings": [], "stderr": ""},
             "tensorflow": {"version": "2.21.0", "cuda": None, "gpus": 0, "warnings": [], "stderr": ""}}
    monkeypatch.setattr(doctor, "framework_view", lambda python, backend, env: views[backend])
    torch = doctor.check_framework("native-torch", Path(sys.executable), host, selection())
    assert torch.verdict == "FAIL" and "need driver 580" in torch.detail and "575.57.08" in torch.detail
    jax = doctor.check_framework("keras3-jax", Path(sys.executable), host, selection(engine="local"))
    assert jax.verdict == "FAIL" and "CPU-only jax" in jax.detail and "env build keras3-jax --device gpu" in jax.fix
    tf = doctor.check_framework("keras3-tensorflow", Path(sys.executable), host, selection())
    assert tf.verdict == "FAIL" and "without CUDA" in tf.detail
    views["torch"] = {"version": "2.14.1", "cuda": "13.0", "gpus": 1}
    assert doctor.check_framework("native-torch", Path(sys.executable), gpu_host(), selection()).verdict == "ok"
    assert doctor.check_framework("native-torch", None, host, selection(engine="local")).verdict == "skip"


class FakeDocker:
    """A Docker client: `docker info`, the images it has, and what `nvidia-smi -L` in a GPU container gives."""

    def __init__(self, images=(), runtimes=("runc",), run_error=None, root="/"):
        self._info = {"ServerVersion": "27.3.1", "DockerRootDir": root, "Runtimes": {name: {} for name in runtimes}}
        self._have, self.run_error = set(images), run_error
        self.images = SimpleNamespace(get=self._get)
        self.containers = SimpleNamespace(run=self._run)

    def info(self):
        return self._info

    def _get(self, name):
        if name not in self._have:
            raise docker.errors.ImageNotFound(name)
        return SimpleNamespace(id="sha256:abc", attrs={"Size": 7 * 10**9})

    def _run(self, image, command, **kwargs):
        assert kwargs["entrypoint"] == ["nvidia-smi"] and command == ["-L"] and kwargs["device_requests"]
        if self.run_error:
            raise self.run_error
        return b"GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n"


def test_docker_without_the_toolkit_fails_with_its_fix(gpu_host, monkeypatch):
    """The daemon's real words when the toolkit is missing: could not select device driver."""
    image = "fwbench/native-torch:current-gpu"
    error = docker.errors.APIError("500 Server Error", explanation='could not select device driver "" with '
                                   'capabilities: [[gpu]]')
    monkeypatch.setattr(doctor, "docker_client", lambda: FakeDocker(images=[image], run_error=error))
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: SimpleNamespace(free=100 * 10**9))
    checks = {c.name: c for c in doctor.docker_checks(selection(engine="docker"), gpu_host())}
    gpu = checks["GPU in a container"]
    assert gpu.verdict == "FAIL" and "could not select device driver" in gpu.detail
    assert "nvidia-container-toolkit" in gpu.fix and "nvidia-ctk runtime configure" in gpu.fix
    assert checks["NVIDIA Container Toolkit"].verdict == "FAIL"
    assert checks[f"image {image}"].verdict == "ok"

    monkeypatch.setattr(doctor, "docker_client", lambda: FakeDocker(images=[image], runtimes=("runc", "nvidia")))
    checks = {c.name: c for c in doctor.docker_checks(selection(engine="docker"), gpu_host())}
    assert checks["NVIDIA Container Toolkit"].verdict == "ok"
    assert checks["GPU in a container"].verdict == "ok" and "H100" in checks["GPU in a container"].detail


def test_docker_missing_images_and_disk(gpu_host, monkeypatch):
    """No images and 5 GB free on the data root (shutil.disk_usage stood in for): both FAIL; no daemon FAILs."""
    monkeypatch.setattr(doctor, "docker_client", lambda: FakeDocker())
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: SimpleNamespace(free=5 * 10**9))
    checks = {c.name: c for c in doctor.docker_checks(selection(("keras3-jax",), engine="docker"), gpu_host())}
    assert checks["image fwbench/keras3-jax:current-gpu"].verdict == "FAIL"
    assert "VARIANT=gpu" in checks["image fwbench/keras3-jax:current-gpu"].fix
    assert checks["disk for images"].verdict == "FAIL" and "7.5 GB" in checks["disk for images"].detail
    assert checks["GPU in a container"].verdict == "skip"

    def unreachable():
        raise docker.errors.DockerException("Error while fetching server API version")

    monkeypatch.setattr(doctor, "docker_client", unreachable)
    [check] = doctor.docker_checks(selection(engine="docker"), gpu_host())
    assert check.verdict == "FAIL" and "cannot reach a Docker engine" in check.detail


def test_local_engine_disk_for_environments(monkeypatch, tmp_path):
    """An empty FWBENCH_HOME: every environment is still to build; 3 GB free (disk_usage stood in for) is short."""
    monkeypatch.setenv("FWBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: SimpleNamespace(free=3 * 10**9))
    checks = {c.name: c for c in doctor.python_checks(selection(engine="local"), doctor.GpuHost())}
    assert checks["disk for environments"].verdict == "FAIL" and "6.3 GB" in checks["disk for environments"].detail
    assert checks["uv"].verdict == "ok"
    assert checks["native-torch: torch GPU view"].verdict == "skip"
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: SimpleNamespace(free=50 * 10**9))
    checks = {c.name: c for c in doctor.python_checks(selection(engine="local"), doctor.GpuHost())}
    assert checks["disk for environments"].verdict == "ok"


# -- the command: exit codes --------------------------------------------------------------------------------

def test_exit_0_when_a_run_would_work_and_1_when_not(gpu_host, monkeypatch):
    """A fake H100 host whose torch sees the GPU exits 0; the same host on driver 575 exits 1."""
    monkeypatch.setattr(doctor, "framework_view", lambda python, backend, env: {"version": "2.14.1", "cuda": "13.0",
                                                                                 "gpus": 1})
    gpu_host()
    runner = CliRunner()
    result = runner.invoke(app, ["doctor", "--engine", "current", "--stack", "native-torch", "--preset", "paper"])
    assert result.exit_code == 0, result.output
    assert "ok    driver vs CUDA wheels" in result.output and "no check FAILs" in result.output
    gpu_host(driver="575.57.08")
    result = runner.invoke(app, ["doctor", "--engine", "current", "--stack", "native-torch"])
    assert result.exit_code == 1 and "FAIL  driver vs CUDA wheels" in result.output


@pytest.mark.parametrize("option", [["--engine", "podman"], ["--stack", "keras4"], ["--preset", "huge"],
                                    ["--pin-set", "2019"]])
def test_a_bad_option_is_a_one_line_error_with_exit_2(option):
    done = subprocess.run([sys.executable, "-m", "fwbench.cli", "doctor", *option], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: unknown") and len(done.stderr.strip().splitlines()) == 1


def test_real_run_on_this_cpu_machine_exits_0_with_the_gpu_checks_skipped():
    """The real command, no stand-ins: on a host without a GPU the GPU checks skip and the CPU path passes."""
    from fwbench.engines.docker import host_has_gpu

    if host_has_gpu():
        pytest.skip("this host has a GPU")
    done = subprocess.run([sys.executable, "-m", "fwbench.cli", "doctor", "--engine", "current", "--preset", "paper"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skip  NVIDIA driver: no NVIDIA GPU" in done.stdout and "skip  GPU memory" in done.stdout
    assert not [line for line in done.stdout.splitlines() if line.startswith("FAIL")]


def test_the_real_probe_reports_a_framework_that_does_not_import():
    """The probe program itself, run in this interpreter for a backend it lacks (or has)."""
    import importlib.util

    backend = next((name for name in ("torch", "jax", "tensorflow") if importlib.util.find_spec(name) is None), None)
    if backend is None:
        pytest.skip("every framework is installed here")
    view = doctor.framework_view(Path(sys.executable), backend, {})
    assert "ModuleNotFoundError" in view["error"]


def test_the_gpu_kit_runs_doctor_first_and_goes_on_after_a_fail(tmp_path, monkeypatch, capsys):
    """fwbench.kit.preflight: doctor runs beside the kit's import checks, its lines land in doctor.txt, a FAIL
    is logged, not raised, and export (at most 8 files) carries doctor.txt. The doctor subprocess is stood in for
    (subprocess.Popen)."""
    from fwbench.kit import preflight
    from fwbench.kit.export import export
    from fwbench.kit.layout import KitFolders
    from fwbench.kit.plan import PlanSettings

    seen = {}

    class FakeDoctor:
        def __init__(self, command, stdout=None, **kwargs):
            seen["command"] = command
            stdout.write("FAIL  driver vs CUDA wheels: driver 575 is too old\n")

        def wait(self, timeout=None):
            return 1

    real = subprocess.Popen

    def popen(command, *args, **kwargs):  # only doctor is stood in for (git, for the commit, runs)
        return FakeDoctor(command, **kwargs) if list(command[1:4]) == ["-m", "fwbench.cli", "doctor"] else \
            real(command, *args, **kwargs)

    monkeypatch.setattr(preflight.subprocess, "Popen", popen)
    folders = KitFolders.at(tmp_path / "kit", tmp_path / "out")
    folders.out.mkdir()
    settings = PlanSettings("paper", tasks=("gemma-fit",))
    assert preflight.finish_doctor(folders, preflight.run_doctor(folders, settings), 60) == 1
    assert seen["command"][3:] == ["doctor", "--engine", "current", "--preset", "paper", "--stack", "native-torch",
                                   "--stack", "keras3-jax", "--stack", "keras3-torch", "--task", "gemma-fit"]
    assert "driver 575" in (folders.out / "doctor.txt").read_text() and "going on" in capsys.readouterr().out
    for name in ("report/report.md", "report/report.html", "host.json", "nvidia-smi.txt", "kit-state.json",
                 "checks.txt", "kit.log"):
        (folders.out / name).parent.mkdir(parents=True, exist_ok=True)
        (folders.out / name).write_text("x")
    folders.rows.mkdir()
    export(folders, tmp_path / "export")
    exported = sorted(path.name for path in (tmp_path / "export").iterdir())
    assert "doctor.txt" in exported and len(exported) <= 8


def test_the_frameworks_gpu_views_are_asked_side_by_side_in_order(monkeypatch):
    """Each framework's GPU view is a process importing it and initialising CUDA (the GPU kit's first window waits
    for doctor): the probes run at once, not one after another (a barrier the three must reach together, probes
    mocked), and the checks keep the stacks' order."""
    import threading

    stacks = ("native-torch", "keras3-jax", "keras3-torch")
    together = threading.Barrier(len(stacks), timeout=10)

    def probe(stack, python, host, chosen):
        together.wait()  # one probe at a time would wait here alone until the timeout
        return doctor.Check(f"{stack}: view", "ok", "sees 1 GPU(s)")

    monkeypatch.setattr(doctor, "check_framework", probe)
    checks = doctor.python_checks(selection(stacks=stacks), doctor.GpuHost())
    assert [check.name for check in checks] == [f"{stack}: view" for stack in stacks]
