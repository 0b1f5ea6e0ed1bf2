"""The GPU kit (benchmarks/gpu/): its plan, its lock, its install checks, and (integration) the whole kit
offline in a simulated host image: a venv with only what the GPU host's image has (no TensorFlow, Keras,
KerasHub, diffusers or segment-anything), the wheelhouse made for its Python, installed with --no-index
--no-deps, and a tiny run of native-torch, keras3-jax and keras3-torch cells on the CPU.

The simulated image (several GB: torch 2.11 with CUDA libraries, JAX, transformers, ...) is built once from
benchmarks/gpu/simulated-image.txt and cached under $FWBENCH_HOME/venvs keyed by that file's hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KIT = REPO / "benchmarks" / "gpu"
sys.path.insert(0, str(KIT))

import kit_install  # noqa: E402
import kit_plan  # noqa: E402
import make_wheelhouse  # noqa: E402
import run_kit  # noqa: E402
from kit_plan import KitState, Unit  # noqa: E402



def image_python() -> tuple[str, str]:
    """(version, interpreter) of the simulated image: the host's Python 3.12 where this machine has one (pyenv's
    on the development machines), else 3.11; the wheelhouse is made for that version (make_wheelhouse.py)."""
    import glob

    for version in ("3.12", "3.11"):
        candidates = [shutil.which(f"python{version}"), *sorted(glob.glob(
            os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))]
        for candidate in filter(None, candidates):
            if subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:  # not a bare shim
                return version, candidate
    pytest.skip("needs python3.12 or python3.11 for the simulated image")


# -- the plan and its state ------------------------------------------------------------------------

def test_plan_runs_every_cell_once_in_the_issues_order_before_any_repeat():
    units, left_out = kit_plan.plan_units(kit_plan.parse_variants(None), kit_plan.parse_tasks(None), 3)
    first_pass = [unit for unit in units if unit.repeat == 0]
    assert units[:len(first_pass)] == first_pass  # every cell once before any repeat
    assert [unit.task for unit in first_pass[:4]] == ["bert-fit"] * 4
    assert first_pass[:4] == [Unit("native-torch", "none", "bert-fit", 0),
                              Unit("native-torch", "reduce-overhead", "bert-fit", 0),
                              Unit("keras3-jax", "xla", "bert-fit", 0), Unit("keras3-torch", "none", "bert-fit", 0)]
    families = [unit.task.split("-")[0] for unit in first_pass]
    assert list(dict.fromkeys(families)) == ["bert", "sam", "stable_diffusion", "gemma", "mistral"]
    # Keras 3 Stable Diffusion needs KerasCV, which needs TensorFlow: left out, with the reason.
    assert not any(u.stack.startswith("keras3") and u.task.startswith("stable_diffusion") for u in units)
    assert len(left_out) == 4 and all("TensorFlow" in line for line in left_out)
    assert len(units) == 3 * (12 * 4 - 4)


def test_bf16_units_follow_every_published_unit_and_find_their_own_rows(tmp_path):
    units, _ = kit_plan.plan_units([("native-torch", "none")], ["bert-fit", "bert-predict"], 2,
                                   precisions=kit_plan.parse_precisions(None))
    assert [unit.precision for unit in units] == ["published"] * 4 + ["bf16"] * 4
    assert units[0].key == "native-torch/none/bert-fit/r0"  # as before precisions: old kit states resume
    assert units[4].key == "native-torch/none/bert-fit@bf16/r0"
    assert kit_plan.parse_precisions("bf16,published,bf16") == ["published", "bf16"]
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        kit_plan.parse_precisions("fp8")
    # Both rows of bert-fit r0 sit in one folder; each unit reads its own (from the row, not the file name).
    from fwbench.core.results import write_row

    folder = tmp_path / "rows" / "tiny" / "native-torch"
    for name, precision in (("bert-fit.compile-none.r0.parquet", "published"),
                            ("bert-fit.compile-none.prec-bf16.r0.parquet", "bf16")):
        write_row({"schema_version": 8, "stack": "native-torch", "task": "bert-fit", "status": "ok",
                   "precision": precision, "repeat": 0}, folder / name)
    assert run_kit.unit_row(tmp_path / "rows", "tiny", units[0])["precision"] == "published"
    assert run_kit.unit_row(tmp_path / "rows", "tiny", units[4])["precision"] == "bf16"


def test_a_host_with_several_gpus_adds_the_data_parallel_fits_on_all_of_them_and_one_gpu_adds_nothing():
    variants, tasks = kit_plan.parse_variants(None), kit_plan.parse_tasks(None)
    precisions = kit_plan.parse_precisions(None)
    one, _ = kit_plan.plan_units(variants, tasks, 3, precisions=precisions, gpus=1)
    assert all(unit.devices == 1 for unit in one)
    assert kit_plan.plan_units(variants, tasks, 3, precisions=precisions, gpus=0)[0] == one
    four, left_out = kit_plan.plan_units(variants, tasks, 3, precisions=precisions, gpus=4)
    scaling = [unit for unit in four if unit.devices > 1]
    # bert-fit (the fit with a data-parallel variant) on all 4 GPUs, once per stack at its first compile mode;
    # keras3-torch too: its row says it has no data parallelism. Every cell once before any repeat.
    assert scaling[:3] == [Unit("native-torch", "none", "bert-fit", 0, "published", 4),
                           Unit("keras3-jax", "xla", "bert-fit", 0, "published", 4),
                           Unit("keras3-torch", "none", "bert-fit", 0, "published", 4)]
    assert len(scaling) == 3 * 3 and [unit.repeat for unit in scaling] == [0] * 3 + [1] * 3 + [2] * 3
    # After every published one-device unit, before the bf16 ones; those, and every key, are as on one GPU (an
    # older kit-state.json resumes; the new units have keys of their own).
    published = sum(unit.precision == "published" for unit in one)
    assert four[published:published + len(scaling)] == scaling
    assert [unit for unit in four if unit.devices == 1] == one
    assert scaling[0].key == "native-torch/none/bert-fit@devices-4/r0"
    assert len({unit.key for unit in four}) == len(four) and len(left_out) == 4
    # No planned task with a data-parallel variant: nothing added.
    assert kit_plan.plan_units(variants, ["bert-predict"], 1, gpus=4)[0] == kit_plan.plan_units(
        variants, ["bert-predict"], 1)[0]
    # The kit says why a host adds nothing, or what it adds.
    assert kit_plan.scaling_note(1, variants, tasks) == ("data-parallel scaling: not planned, this host has 1 usable "
                                                         "GPU (a host with N > 1 GPUs also runs bert-fit at --devices N)")
    assert "bert-fit also at --devices 4" in kit_plan.scaling_note(4, variants, tasks)
    assert "no planned task" in kit_plan.scaling_note(4, variants, ["bert-predict"])


def test_a_data_parallel_unit_asks_for_its_devices_and_finds_its_own_row(tmp_path, monkeypatch):
    import argparse

    from fwbench.core.results import write_row

    unit = Unit("native-torch", "none", "bert-fit", 0, "published", 2)
    one = Unit("native-torch", "none", "bert-fit", 0)
    folder = tmp_path / "rows" / "tiny" / "native-torch"
    for name, devices in (("bert-fit.compile-none.r0.parquet", 1), ("bert-fit.compile-none.devices-2.r0.parquet", 2)):
        write_row({"schema_version": 9, "stack": "native-torch", "task": "bert-fit", "status": "ok",
                   "precision": "published", "repeat": 0, "devices": devices}, folder / name)
    assert run_kit.unit_row(tmp_path / "rows", "tiny", unit)["devices"] == 2
    assert run_kit.unit_row(tmp_path / "rows", "tiny", one)["devices"] == 1
    commands = []
    monkeypatch.setattr(run_kit.subprocess, "run", lambda argv, **kwargs: commands.append(argv))
    args = argparse.Namespace(out=tmp_path, preset="tiny", data=tmp_path / "data", steps=None, site=tmp_path / "site")
    run_kit.run_unit(unit, args, 100)
    run_kit.run_unit(one, args, 100)
    assert commands[0][commands[0].index("--devices") + 1] == "2" and "--devices" not in commands[1]


def test_a_chunk_on_a_host_with_two_gpus_runs_bert_fit_on_both_after_the_one_device_cells(tmp_path, monkeypatch):
    """The host's GPU count is the boundary (mocked); the cell processes are replaced by rows."""
    for name in ("install", "aggregate", "run_doctor"):
        monkeypatch.setattr(run_kit, name, lambda *a, **k: None)
    monkeypatch.setattr(run_kit, "check_imports", lambda *a, **k: [])
    monkeypatch.setattr(run_kit, "broken_stacks", lambda *a, **k: {})
    monkeypatch.setattr(run_kit, "record_host", lambda *a, **k: {})
    logged, ran = [], []
    monkeypatch.setattr(run_kit, "log", logged.append)
    monkeypatch.setattr(run_kit, "run_unit", lambda unit, args, timeout_s, extra=None, rows=None: ran.append(
        unit) or {"status": "ok", "ms_per_step": 1.0})
    argv = ["run", "--out", str(tmp_path / "out"), "--tasks", "bert-fit", "--repeats", "1", "--precisions",
            "published", "--variants", "native-torch:none,native-torch:reduce-overhead,keras3-jax"]
    monkeypatch.setattr(run_kit, "usable_gpu_count", lambda: 1)
    assert run_kit.main(argv) == 0
    assert [unit.devices for unit in ran] == [1, 1, 1]
    assert any("not planned, this host has 1 usable GPU" in line for line in logged), logged
    monkeypatch.setattr(run_kit, "usable_gpu_count", lambda: 2)  # the same state, resumed on a 2-GPU host
    assert run_kit.main(argv) == 0
    assert [unit.key for unit in ran[3:]] == ["native-torch/none/bert-fit@devices-2/r0",
                                             "keras3-jax/xla/bert-fit@devices-2/r0"]
    assert any("bert-fit also at --devices 2" in line for line in logged), logged


def test_variants_parse_and_bad_ones_are_refused():
    assert kit_plan.parse_variants("native-torch:reduce-overhead,keras3-jax") == [
        ("native-torch", "reduce-overhead"), ("keras3-jax", "xla")]
    with pytest.raises(ValueError, match="STACK:COMPILE_MODE"):
        kit_plan.parse_variants("nosuchstack")


def test_state_resumes_skips_failures_and_waits_for_an_ok_previous_repeat(tmp_path):
    state = KitState(tmp_path / "kit-state.json")
    first, second = Unit("native-torch", "none", "bert-fit", 0), Unit("native-torch", "none", "bert-fit", 1)
    assert state.runnable(first, False) and not state.runnable(second, False)
    state.record(first, "oom", 12.0, None)
    assert not state.runnable(first, False) and state.runnable(first, True)
    assert not state.runnable(second, False)  # repeating a failing cell would only repeat the failure
    state.record(first, "ok", 40.0, 3.2)
    (tmp_path / "kit-state.json").write_text(state.to_json())
    again = KitState(tmp_path / "kit-state.json")
    assert not again.runnable(first, False) and again.runnable(second, False)
    # A repeat of a cell that ran ok should have about its wall time left before it starts.
    assert run_kit.needed_s(again, second, 150.0) == 60.0
    again.record(first, "ok", 10.0, 3.2)
    assert run_kit.needed_s(again, second, 150.0) == run_kit.MIN_REPEAT_S
    assert run_kit.needed_s(again, Unit("keras3-jax", "xla", "bert-fit", 0), 150.0) == 150.0
    again.record(first, "budget-cut", 80.0, None)
    assert again.runnable(first, False)  # cut by the chunk, not by its own timeout: runs again


def test_a_chunk_gives_each_cell_what_is_left_and_reruns_a_cell_the_budget_cut(tmp_path, monkeypatch):
    """The scheduling alone: the cell processes are replaced by rows (the CLI boundary is mocked)."""
    from fwbench.core.results import write_row

    clock = {"now": 1000.0}
    monkeypatch.setattr(run_kit.time, "monotonic", lambda: clock["now"])
    for name in ("install", "aggregate"):
        monkeypatch.setattr(run_kit, name, lambda *a, **k: None)
    monkeypatch.setattr(run_kit, "check_imports", lambda *a, **k: [])
    monkeypatch.setattr(run_kit, "broken_stacks", lambda *a, **k: {})
    monkeypatch.setattr(run_kit, "record_host", lambda *a, **k: {})
    monkeypatch.setattr(run_kit, "usable_gpu_count", lambda: 1)  # no data-parallel units: the host's count
    calls = []
    durations = iter([100.0, 300.0, 90.0])

    def fake_unit(unit, args, timeout_s, extra=None, rows=None):
        took = next(durations)
        calls.append((unit.key, round(timeout_s)))
        clock["now"] += min(took, timeout_s)
        status = "ok" if took <= timeout_s else "timeout"
        path = args.out / "rows" / args.preset / unit.stack / f"{unit.task}.compile-{unit.compile_mode}.r{unit.repeat}.parquet"
        row = {"status": status, "ms_per_step": 1.0, "error_message": None if status == "ok" else "timed out"}
        write_row({"schema_version": 8, "stack": unit.stack, "task": unit.task, "repeat": unit.repeat, **row}, path)
        return row

    monkeypatch.setattr(run_kit, "run_unit", fake_unit)
    argv = ["run", "--out", str(tmp_path / "out"), "--tasks", "bert-fit,bert-predict", "--variants",
            "native-torch:none", "--repeats", "1", "--budget-s", "400", "--cell-timeout", "480", "--precisions",
            "published"]
    assert run_kit.main(argv) == 0
    # Budget 400 less 20 s overhead and 30 s reserve: the first cell may take 350 s; the second gets the 250 s
    # left, needs 300 and is cut: its row is removed, and the next chunk runs it first with the full 350 s.
    assert calls == [("native-torch/none/bert-fit/r0", 350), ("native-torch/none/bert-predict/r0", 250)]
    state = KitState(tmp_path / "out" / "kit-state.json")
    assert state.status(Unit("native-torch", "none", "bert-predict", 0)) == "budget-cut"
    assert not (tmp_path / "out" / "rows" / "paper" / "native-torch" / "bert-predict.compile-none.r0.parquet").exists()
    assert run_kit.main(argv) == 0
    assert calls[2] == ("native-torch/none/bert-predict/r0", 350)
    assert KitState(tmp_path / "out" / "kit-state.json").status(Unit("native-torch", "none", "bert-predict", 0)) == "ok"


def test_a_stack_whose_imports_fail_is_left_out_with_its_reason_and_the_others_run(tmp_path, monkeypatch):
    """The imports (a subprocess in the host image) are the boundary: keras3-jax's are said to fail."""
    for name in ("install", "aggregate", "run_doctor"):
        monkeypatch.setattr(run_kit, name, lambda *a, **k: None)
    monkeypatch.setattr(run_kit, "check_imports", lambda *a, **k: [])
    monkeypatch.setattr(run_kit, "record_host", lambda *a, **k: {})
    monkeypatch.setattr(run_kit, "usable_gpu_count", lambda: 1)
    monkeypatch.setattr(run_kit, "broken_stacks", lambda site, stacks: {
        "keras3-jax": "does not import here: jax: ImportError: libcudart.so.13: cannot open shared object file"})
    ran = []
    monkeypatch.setattr(run_kit, "run_unit", lambda unit, args, timeout_s, extra=None, rows=None: ran.append(
        unit.key) or {"status": "ok", "ms_per_step": 1.0})
    logged = []
    monkeypatch.setattr(run_kit, "log", logged.append)
    argv = ["run", "--out", str(tmp_path / "out"), "--tasks", "bert-predict", "--repeats", "1",
            "--variants", "native-torch:none,keras3-jax,keras3-torch"]
    assert run_kit.main(argv) == 0
    # Every published unit first, then bf16 (the default --precisions), when time allows.
    assert ran == ["native-torch/none/bert-predict/r0", "keras3-torch/none/bert-predict/r0",
                   "native-torch/none/bert-predict@bf16/r0", "keras3-torch/none/bert-predict@bf16/r0"]
    assert any(line.startswith("left out: keras3-jax [xla], every task: does not import here: jax: ImportError")
               for line in logged), logged


def test_generate_cells_get_a_step_count_that_fits_the_kits_cell_timeout():
    """Published keras3-torch generate steps took 7.6-11.1 s: 100 of them never fit a 480 s cell. The per-task
    default (part of the identity, on the row as timed_steps) does, with the warm-up and first step."""
    from fwbench.core import registry

    worst_step_s = 11.1
    for task in ("gemma-generate-bs32", "mistral-generate-bs1"):
        steps = registry.default_steps(task, "paper")
        assert (1 + registry.get_preset("paper").warmup + steps) * worst_step_s < 480 / 2, steps
    assert registry.default_steps("bert-fit", "paper") == 100 and registry.default_steps("gemma-generate-bs1",
                                                                                         "tiny") == 5


def test_publish_names_the_folder_after_the_date_and_gpu_and_refuses_cpu_rows(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    (out / "rows" / "paper" / "native-torch").mkdir(parents=True)
    (out / "rows" / "paper" / "native-torch" / "bert-fit.compile-none.r0.parquet").write_bytes(b"row")
    host = {"recorded_at": "2026-11-24T19:00:00+00:00", "nvml": {}}
    (out / "host.json").write_text(json.dumps(host))
    monkeypatch.setattr(run_kit, "aggregate", lambda args: None)
    argv = ["publish", "--out", str(out), "--dest", str(tmp_path / "results")]
    assert run_kit.main(argv) == 1
    assert capsys.readouterr().err.strip() == "error: host.json names no GPU: these rows are not GPU results"
    host["nvml"] = {"gpu_names": ["NVIDIA H100 80GB HBM3"]}
    (out / "host.json").write_text(json.dumps(host))
    assert run_kit.main(argv) == 0
    published = tmp_path / "results" / "2026-11-24-nvidia-h100-80gb-hbm3"
    assert (published / "rows" / "paper" / "native-torch" / "bert-fit.compile-none.r0.parquet").is_file()
    assert (published / "host.json").is_file()


def test_export_and_restore_carry_the_rows_and_state_to_a_fresh_folder(tmp_path, capsys):
    import argparse
    import tarfile

    out, export = tmp_path / "out", tmp_path / "export"
    (out / "rows" / "paper" / "keras3-jax").mkdir(parents=True)
    (out / "rows" / "paper" / "keras3-jax" / "bert-fit.compile-xla.r0.parquet").write_bytes(b"row")
    (out / "kit-state.json").write_text('{"units": {}}')
    (out / "host.json").write_text("{}")
    run_kit.export(argparse.Namespace(out=out, export=export))
    assert sorted(path.name for path in export.iterdir()) == ["host.json", "kit-state.json", "rows.tar.gz"]
    fresh = tmp_path / "fresh"
    assert run_kit.main(["restore", str(export / "rows.tar.gz"), "--out", str(fresh)]) == 0
    assert (fresh / "rows" / "paper" / "keras3-jax" / "bert-fit.compile-xla.r0.parquet").read_bytes() == b"row"
    assert (fresh / "kit-state.json").is_file() and (fresh / "host.json").is_file()
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        tar.add(out / "host.json", arcname="rows/../../escaped.json")
    assert run_kit.main(["restore", str(evil), "--out", str(tmp_path / "other")]) == 1
    assert "unexpected links or paths" in capsys.readouterr().err
    assert not (tmp_path / "escaped.json").exists()


# -- the wheelhouse lock ---------------------------------------------------------------------------

def test_lock_follows_the_repository_pins_and_fits_the_host():
    lock = json.loads(make_wheelhouse.LOCK.read_text())
    assert "cp312" in lock, "the host's Python (3.12) must have a locked wheelhouse"
    for tag, entries in lock.items():
        assert {entry["name"] for entry in entries} == set(make_wheelhouse.SOURCES), tag
        for entry in entries:
            assert entry["version"] == make_wheelhouse.pinned(entry["name"]), (tag, entry["name"])
            assert len(entry["sha256"]) == 64
            name = entry["filename"]
            assert name.endswith("-py3-none-any.whl") or (f"-{tag}-{tag}-" in name and name.endswith("x86_64.whl")), name
        assert sum(entry["bytes"] for entry in entries) < make_wheelhouse.LIMIT_BYTES
        assert not any(entry["name"] in ("tensorflow", "keras-cv") for entry in entries)


def test_wheelhouse_refuses_a_download_whose_hash_is_not_the_locked_one(tmp_path, monkeypatch, capsys):
    """PyPI is the boundary: `download` hands back a wheel of the locked name with other bytes."""
    locked = {entry["name"]: entry for entry in json.loads(make_wheelhouse.LOCK.read_text())["cp312"]}

    def fake_download(name, version, python_version, into):
        path = into / locked[name]["filename"]
        path.write_bytes(b"not the wheel that was locked")
        return path

    monkeypatch.setattr(make_wheelhouse, "download", fake_download)
    dest = tmp_path / "wheels"
    assert make_wheelhouse.main(["--dest", str(dest)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: keras-3.15.1-py3-none-any.whl: sha256 ") and "differs from the locked" in err
    assert not list(dest.glob("*.whl"))  # nothing half-made is left where the kit looks


def test_install_refuses_a_wheel_whose_hash_is_not_the_locked_one(tmp_path, monkeypatch, capsys):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    entry = {"name": "keras", "version": "3.15.1", "filename": "keras-3.15.1-py3-none-any.whl",
             "sha256": hashlib.sha256(b"the real wheel").hexdigest(), "bytes": 14}
    lock = tmp_path / "lock.json"
    lock.write_text(json.dumps({kit_install.python_tag(): [entry]}))
    monkeypatch.setattr(kit_install, "LOCK", lock)
    (wheels / entry["filename"]).write_bytes(b"a tampered wheel")
    code = run_kit.main(["install", "--wheels", str(wheels), "--site", str(tmp_path / "site")])
    assert code == 1
    assert capsys.readouterr().err.strip() == (
        "error: keras-3.15.1-py3-none-any.whl: its SHA-256 is not the one in lock.json")
    assert not (tmp_path / "site").exists()
    (wheels / entry["filename"]).unlink()
    assert run_kit.main(["install", "--wheels", str(wheels), "--site", str(tmp_path / "site")]) == 1
    assert "is missing" in capsys.readouterr().err


def test_unknown_names_are_one_line_errors(capsys):
    assert run_kit.main(["status", "--tasks", "bert-fit,no-such-task"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "no-such-task" in err and "\n" not in err
    assert run_kit.main(["status", "--variants", "native-torch:max-speed"]) == 1
    assert capsys.readouterr().err.startswith("error: ")


# -- the whole kit, offline, in a simulated host image -----------------------------------------------

def simulated_image() -> tuple[Path, str]:
    """A venv with what the host's image has (benchmarks/gpu/simulated-image.txt), built once and cached; and its
    Python version."""
    version, python = image_python()
    requirements = KIT / "simulated-image.txt"
    key = hashlib.sha256(requirements.read_bytes()).hexdigest()[:12]
    home = Path(os.environ.get("FWBENCH_HOME", Path.home() / ".cache" / "fwbench"))
    # Beside the stack environments, so that CI's clean-up of those before its image builds returns this disk too.
    venv = home / "venvs" / f"gpu-kit-sim-image-py{version}-{key}"
    if not (venv / ".fwbench-ready").is_file():
        from fwbench.engines.local import uv_binary, uv_environment

        shutil.rmtree(venv, ignore_errors=True)
        # Through the stack environments' uv cache, hard-linked: what it shares with them (JAX, transformers and
        # their dependencies) is downloaded and stored once; its torch is the host's release, not the locks'.
        uv_env = {**os.environ, **uv_environment(home)}
        uv = str(uv_binary())
        subprocess.run([uv, "venv", "-q", "--seed", "--python", python, str(venv)], check=True, env=uv_env)
        subprocess.run([uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "-r",
                        str(requirements)], check=True, timeout=3600, env=uv_env)
        (venv / ".fwbench-ready").touch()
    return venv / "bin" / "python", version


def kit(python: Path, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    """run_kit.py with the image's interpreter and no index within reach: pip is told to use none, and a
    proxy that does not exist stops anything else from reaching out."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_NO_INDEX="1", HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")
    return subprocess.run([str(python), str(KIT / "run_kit.py"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO)


@pytest.mark.integration
def test_kit_installs_offline_and_runs_every_stack_in_a_simulated_host_image(tmp_path):
    started = time.monotonic()
    python, image_version = simulated_image()
    lacking = subprocess.run([str(python), "-c", "import importlib.util as u; print([m for m in ('tensorflow', "
                              "'keras', 'keras_hub', 'keras_cv', 'diffusers', 'segment_anything', 'grain') "
                              "if u.find_spec(m)])"], capture_output=True, text=True, check=True)
    assert lacking.stdout.strip() == "[]", "the simulated image must lack what the wheelhouse brings"

    wheels = tmp_path / "wheels"
    made = subprocess.run([sys.executable, str(KIT / "make_wheelhouse.py"), "--python-version", image_version,
                           "--dest", str(wheels)], capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr
    assert "wheelhouse: 11 wheels" in made.stdout

    out, export = tmp_path / "out", tmp_path / "export"
    common = ["--wheels", str(wheels), "--site", str(tmp_path / "site"), "--out", str(out),
              "--data", str(tmp_path / "data"), "--preset", "tiny", "--repeats", "1",
              "--tasks", "bert-predict", "--variants", "native-torch:none,keras3-jax,keras3-torch",
              "--precisions", "published"]  # bf16 units: a unit test (the plan), not more cells here
    # A budget too small for any cell: installs, records the host, starts nothing, says why.
    first = kit(python, "run", *common, "--budget-s", "60", "--cell-timeout", "120")
    assert first.returncode == 0, first.stderr + first.stdout
    assert "installed 11 wheels" in first.stdout and "stopping:" in first.stdout
    assert json.loads((out / "host.json").read_text())["versions"]["keras"] == "3.15.1"
    chunk = kit(python, "run", *common, "--budget-s", "500", "--cell-timeout", "150", "--export", str(export))
    assert chunk.returncode == 0, chunk.stderr + chunk.stdout
    for _ in range(2):  # on a loaded machine one chunk may not fit the three cells: the next goes on from there
        if "; 0 left" in chunk.stdout:
            break
        chunk = kit(python, "run", *common, "--budget-s", "500", "--cell-timeout", "150", "--export", str(export))
    again = kit(python, "run", *common, "--budget-s", "500", "--cell-timeout", "150")
    assert "ran 0 units this chunk; 0 left" in again.stdout, again.stdout  # resumed: nothing left to run

    sys.path.insert(0, str(REPO / "runner"))
    from fwbench.core.results import read_row

    rows = [read_row(path) for path in sorted((out / "rows").rglob("*.parquet"))]
    assert sorted((row["stack"], row["task"]) for row in rows) == sorted(
        (stack, task) for stack in ("native-torch", "keras3-jax", "keras3-torch")
        for task in ("bert-predict",))
    for row in rows:
        assert row["status"] == "ok", (row["stack"], row["task"], row["error_message"])
        assert row["engine"] == "current" and row["pin_set"] == "current"
        versions = json.loads(row["library_versions"])
        if row["stack"] != "native-torch":
            assert versions["keras"] == "3.15.1" and "tensorflow" not in versions
            assert json.loads(row["extra"])["input_pipeline"] == "grain" and "grain" in versions
    assert (out / "report" / "report.md").is_file()
    exported = sorted(path.name for path in export.iterdir())
    assert {"rows.tar.gz", "report.md", "host.json", "kit-state.json"} <= set(exported) and len(exported) <= 8

    # The GPU checks run offline too; on this CPU the GPU-only ones say SKIP, the others must pass.
    checks = kit(python, "checks", *common, "--cell-timeout", "150")
    assert checks.returncode == 0, checks.stderr + checks.stdout
    verdicts = {line.split(":")[0][5:]: line[:4].strip() for line in (out / "checks.txt").read_text().splitlines()}
    assert verdicts == {"per-step sync": "SKIP", "TF32 recorded as set": "PASS", "compiled Trainer fit runs": "SKIP",
                        "reduce-overhead replays CUDA graphs": "SKIP", "competing GPU process marks rows busy": "SKIP",
                        "each row ran on its own GPUs (one, or --devices N), named by UUID": "SKIP", "peak memory filled": "PASS",
                        "energy columns": "SKIP"}, (out / "checks.txt").read_text()
    print(f"\ngpu kit test: {time.monotonic() - started:.0f} s; simulated image "
          f"{sum(f.stat().st_size for f in python.parents[1].rglob('*') if f.is_file()) / 2**30:.1f} GiB")


def test_cuda_graph_check_fails_naming_every_compiled_row_whose_compile_did_not_take_effect(capsys):
    """The check on a GPU (mocked: the kit's own cell is a stand-in row), over its own cell and the kit's rows."""
    import kit_checks

    def row(cell_id, mode, took, status="ok"):
        return {"cell_id": cell_id, "status": status, "compile_mode": mode, "compile_took_effect": took,
                "compiled_graphs": 4, "cudagraph_skips": 0, "cudagraph_replays": 0 if not took else 100,
                "timed_steps": 100}

    checks = object.__new__(kit_checks.Checks)
    checks.lines, checks.failed, checks.gpu = [], False, True
    checks.cell = (lambda name, mode="none", extra=None, preset=None, task=None, precision="published":
                   row("own.bert-predict", mode, True))
    kit = [row("native-torch.sd-predict", "reduce-overhead", False),
           row("native-torch.bert-fit", "reduce-overhead", True),
           row("native-torch.sam-fit", "none", None), row("native-torch.gemma-fit", "reduce-overhead", None, "error")]
    checks.cuda_graphs(kit)
    assert checks.failed and checks.lines[-1].startswith("FAIL")
    named = checks.lines[-1].split("not in effect")[1]
    assert "native-torch.sd-predict" in named and "bert-fit" not in named
    checks.lines, checks.failed = [], False
    checks.cuda_graphs([kit[1], kit[2]])
    assert not checks.failed and checks.lines[-1].startswith("PASS") and "1 compiled kit rows" in checks.lines[-1]
    checks.gpu = False
    checks.cuda_graphs(kit)
    assert checks.lines[-1].startswith("SKIP")


def test_the_gpu_only_checks_judge_what_the_rows_say(monkeypatch):
    """TF32 per setting, one GPU by UUID (NVML mocked) and energy, on a GPU (mocked) over stand-in rows."""
    import kit_checks
    from fwbench.harness import nvml

    checks = object.__new__(kit_checks.Checks)
    checks.lines, checks.failed, checks.gpu = [], False, True
    state = {"default": (False, True), "on": (True, True), "off": (False, True)}  # off did not reach convolutions

    def cell(name, mode="none", extra=None, preset=None, task=None, precision="published"):
        setting = extra[-1]
        matmul, conv = state[setting]
        return {"status": "ok", "cell_id": name, "tf32_setting": setting, "tf32_matmul": matmul, "tf32_conv": conv,
                "tf32_effective": matmul, "tf32_conv_effective": conv}

    checks.cell = cell
    checks.tf32()
    assert checks.failed and "--tf32 off: allowed (False, True)" in checks.lines[-1]
    state["off"] = (False, False)
    checks.lines, checks.failed = [], False
    checks.tf32()
    assert not checks.failed and checks.lines[-1].startswith("PASS")

    class FakeNvml:
        @staticmethod
        def nvmlDeviceGetHandleByIndex(index):
            return index

        @staticmethod
        def nvmlDeviceGetUUID(handle):
            return f"GPU-{handle}"

    monkeypatch.setattr(nvml, "nvml_query", lambda query: query(FakeNvml))
    good = {"status": "ok", "cell_id": "a", "device": "cuda", "device_count": 1, "gpu_index": 1, "gpu_uuid": "GPU-1",
            "energy_status": "ok", "energy_j": 1.0, "joules_per_step": 0.1, "mean_power_w": 300.0}
    short = {**good, "cell_id": "b", "energy_status": "window_too_short", "energy_j": None, "joules_per_step": None,
             "mean_power_w": None}
    # A --devices 2 cell sees its 2 GPUs (the runner lists them in extra.gpu_indices, gpu_index first).
    pair = {**good, "cell_id": "pair", "devices": 2, "device_count": 2, "extra": json.dumps({"gpu_indices": [1, 2]})}
    checks.gpus_by_uuid([good, short, pair])
    assert checks.lines[-1].startswith("PASS") and "3 of 3" in checks.lines[-1]
    checks.gpus_by_uuid([good, {**good, "cell_id": "cpu", "device": "cpu"},
                         {**good, "cell_id": "two", "device_count": 2}, {**good, "cell_id": "x", "gpu_uuid": "GPU-0"},
                         {**pair, "cell_id": "one-of-two", "device_count": 1},
                         {**pair, "cell_id": "shared", "extra": json.dumps({"gpu_indices": [1, 1]})}])
    assert checks.lines[-1].startswith("FAIL") and all(w in checks.lines[-1] for w in (
        "cpu ran on cpu", "two saw 2 GPUs, asked for 1", "x: gpu_uuid GPU-0", "one-of-two saw 1 GPUs, asked for 2",
        "shared: --devices 2 but gpu_indices [1, 1]")), checks.lines[-1]
    checks.lines, checks.failed = [], False
    checks.energy([good, short])
    assert checks.lines[-1].startswith("PASS") and "window_too_short 1" in checks.lines[-1]
    checks.energy([good, {**short, "energy_status": "nvml_unavailable"}])
    assert checks.lines[-1].startswith("FAIL")
