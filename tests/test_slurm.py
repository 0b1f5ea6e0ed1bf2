"""fwbench slurm without a cluster: checks, the batch script, the skip of ok cells, and a task's stop rows.

The real one-node cluster runs in tests/test_slurm_cluster.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from fwbench.cluster import cellplan, slurm
from fwbench.core import results
from fwbench.harness.cell import base_record
from fwbench.core.spec import CellSpec
from tests.conftest import FWBENCH, run_fwbench

SPEC = CellSpec(stack="native-torch", task="bert-predict", preset="tiny", compile_mode="none", data_dir="/d",
                steps=3, engine="local", image_variant="venv")


@pytest.mark.parametrize("gres", ["gpu:1", "gpu", "gpu:a100:2", "gpu:1,mps:100", "gpu:h100-80gb:8"])
def test_well_formed_gres_passes(gres):
    slurm.check_gres(gres)


@pytest.mark.parametrize("gres", ["", "gpu:", "gpu::1", ":1", "gpu:a100:x", "gpu:1:2:3", "1gpu:1", "gpu 1", "gpu:1,"])
def test_malformed_gres_is_refused(gres):
    with pytest.raises(slurm.SlurmError, match="is malformed"):
        slurm.check_gres(gres)


@pytest.mark.parametrize("text,seconds", [("5", 300), ("1:30", 90), ("2:00:00", 7200), ("1-2", 93600),
                                          ("1-0:30", 88200), ("0-0:0:20", 20)])
def test_slurm_times_are_read_as_slurm_reads_them(text, seconds):
    slurm.check_time(text)
    assert slurm.time_limit_s(text) == seconds


@pytest.mark.parametrize("text", ["", "1h", "1:2:3:4", "-5", "1.5"])
def test_bad_times_are_refused(text):
    with pytest.raises(slurm.SlurmError, match="not a Slurm time"):
        slurm.check_time(text)


def test_default_time_limit_covers_the_slowest_cell_and_the_stop_grace():
    specs = [replace(SPEC, timeout_s=600), replace(SPEC, timeout_s=1200)]
    assert slurm.time_limit_s(slurm.default_time_limit(specs, 90)) >= 1200 + 90 + 600


@pytest.mark.parametrize("reference,enroot", [
    # enroot reads `registry#image:tag` and fetches /v2/<image>/manifests/<tag>: a digest goes there.
    ("ghcr.io/o/fwbench/keras3-jax@sha256:ab", "ghcr.io#o/fwbench/keras3-jax:sha256:ab"),
    ("ghcr.io/o/fwbench/keras3-jax:current-gpu@sha256:ab", "ghcr.io#o/fwbench/keras3-jax:sha256:ab"),
    ("localhost:5000/fwbench/keras3-jax@sha256:ab", "localhost:5000#fwbench/keras3-jax:sha256:ab"),
    ("localhost:5000/fwbench/native-torch:current-gpu", "localhost:5000#fwbench/native-torch:current-gpu"),
    ("fwbench/native-torch:current-gpu", "fwbench/native-torch:current-gpu"),  # Docker Hub: enroot's default
])
def test_pyxis_gets_enroot_image_names(reference, enroot):
    assert slurm.enroot_reference(reference) == enroot


def _script(tmp_path, container, image=None):
    options = slurm.SlurmOptions(partition="gpu", gres="gpu:1", time_limit="30", cpus_per_task=8, mem="32G",
                                 container=container, max_running=4, extra=("--constraint=a100",))
    text = slurm.job_script(tmp_path / "sub", tmp_path / "out", tmp_path / "data", 12, options, image=image,
                            time_limit="30")
    path = tmp_path / f"{container}.sbatch"
    path.write_text(text)
    subprocess.run(["bash", "-n", str(path)], check=True)  # valid shell
    return text


def test_the_batch_script_is_one_array_task_per_cell(tmp_path):
    text = _script(tmp_path, "none")
    for line in ("#SBATCH --array=0-11%4", "#SBATCH --partition=gpu", "#SBATCH --gres=gpu:1", "#SBATCH --time=30",
                 "#SBATCH --cpus-per-task=8", "#SBATCH --mem=32G", "#SBATCH --constraint=a100",
                 "#SBATCH --signal=USR1@90", f"#SBATCH --output=\"{tmp_path}/sub/logs/%a.out\""):
        assert line in text.splitlines()
    command = text.splitlines()[-1]
    assert command.startswith("exec srun --ntasks=1 --cpus-per-task=8 ")
    assert f"{sys.executable} -m fwbench.cli slurm run-cell {tmp_path}/sub/cells.json --out {tmp_path}/out" in command


def test_container_runtimes_run_the_image_by_digest_with_the_folders_mounted(tmp_path):
    image = "ghcr.io/o/fwbench/native-torch@sha256:" + "a" * 64
    pyxis = _script(tmp_path, "pyxis", image).splitlines()[-1]
    assert f"--container-image=ghcr.io#o/fwbench/native-torch:sha256:{'a' * 64}" in pyxis
    assert f"--container-mounts={tmp_path}/out:/results,{tmp_path}/sub:/submission,{tmp_path}/data:/data" in pyxis
    assert pyxis.endswith("fwbench slurm run-cell /submission/cells.json --out /results --submission /submission")
    apptainer = _script(tmp_path, "apptainer", image).splitlines()[-1]
    assert f"apptainer exec --nv --containall --env HOME=/tmp --bind {tmp_path}/out:/results," in apptainer
    assert f"docker://{image} fwbench slurm run-cell" in apptainer


def test_a_resubmission_skips_cells_with_ok_rows_whatever_device_they_ran_on(tmp_path):
    done = replace(SPEC, device_model="NVIDIA H100 80GB HBM3")
    record = {**base_record(done), "status": "ok"}
    results.write_row(record, results.readable_path(done, tmp_path))
    failed = replace(SPEC, task="bert-fit")
    results.write_row({**base_record(failed), "status": "error"}, results.readable_path(failed, tmp_path))
    ok = slurm.ok_cells(tmp_path)
    assert slurm.completed_identity(SPEC) in ok
    assert slurm.completed_identity(failed) not in ok  # only ok rows count as done
    assert slurm.completed_identity(replace(SPEC, threads=4)) not in ok  # other settings: another cell
    assert slurm.completed_identity(replace(SPEC, repeat=1)) not in ok


def test_a_resubmission_skips_cells_whose_ok_row_has_an_older_schema(tmp_path):
    from tests.test_results import write_v7_ok_row

    write_v7_ok_row(SPEC, results.readable_path(SPEC, tmp_path))
    assert slurm.completed_identity(SPEC) in slurm.ok_cells(tmp_path)


def test_submit_without_slurm_is_one_line_and_writes_nothing(tmp_path):
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    if any(Path(d, "sbatch").exists() for d in env["PATH"].split(":")):
        env["PATH"] = str(Path(sys.executable).parent)
    done = run_fwbench("slurm", "submit", "--stack", "native-torch", "--task", "bert-predict", "--out",
                       str(tmp_path / "out"), "--engine", "current", "--data", str(tmp_path / "data"), env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: sbatch was not found on PATH: run this on a Slurm login node (or put Slurm's client commands on PATH)"]
    assert not (tmp_path / "out" / ".slurm").exists()


@pytest.mark.parametrize("args,message", [
    (["--gres", "gpu::1"], "error: --gres 'gpu::1' is malformed"),
    (["--time", "1h"], "error: --time '1h' is not a Slurm time"),
    (["--container", "docker"], "error: --container must be one of none, pyxis, apptainer"),
    (["--cpus-per-task", "0"], "error: --cpus-per-task must be at least 1"),
    (["--release", "r.json"], "error: --release needs --container pyxis or apptainer"),
])
def test_bad_submit_options_are_one_line(tmp_path, args, message):
    done = run_fwbench("slurm", "submit", "--stack", "native-torch", "--task", "bert-predict", "--engine", "current",
                       "--out", str(tmp_path / "out"), "--data", str(tmp_path / "data"), *args)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith(message), done.stderr


def test_status_without_submissions_is_one_line(tmp_path):
    done = run_fwbench("slurm", "status", "--out", str(tmp_path))
    assert done.returncode == 2 and done.stderr.startswith("error: no Slurm submissions in"), done.stderr


@pytest.mark.parametrize("sig,status,words", [(signal.SIGUSR1, "timeout", "time limit"),
                                              (signal.SIGTERM, "cancelled", "stopped the array task")])
def test_a_task_stopped_by_slurm_leaves_a_row_saying_so(tmp_path, sig, status, words):
    """A real cell process (the current engine; an injected sleep keeps it running) gets the signal Slurm
    sends: the task stops it and writes the row."""
    from fwbench.core import data

    data.generate(tmp_path / "data", "tiny", 0, ["bert-predict"])
    spec = replace(SPEC, data_dir=str(tmp_path / "data"), engine="current", image_variant="host", fault="sleep:120")
    plan = tmp_path / "sub" / "cells.json"
    cellplan.write_plan(plan, [spec])
    (tmp_path / "sub" / "done").mkdir()
    out = tmp_path / "out"
    task = subprocess.Popen([*FWBENCH, "slurm", "run-cell", str(plan), "--out", str(out), "--submission",
                             str(tmp_path / "sub")], env={**os.environ, "SLURM_ARRAY_TASK_ID": "0"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list((out / "logs").glob("*.log")) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # the cell process is running
    task.send_signal(sig)
    _, stderr = task.communicate(timeout=60)
    assert task.returncode == 0, stderr
    [path] = [p for p in out.rglob("*.parquet")]
    row = results.read_row(path)
    assert row["status"] == status and words in row["error_message"], row
    assert row["error_type"] == f"Stopped by {sig.name}"
    marker = (tmp_path / "sub" / "done" / "0.json").read_text()
    assert status in marker


@pytest.mark.parametrize("options, says", [
    (slurm.SlurmOptions(partition="gpu\n#SBATCH --uid=0"), "--partition"),
    (slurm.SlurmOptions(account="acct x"), "--account"),
    (slurm.SlurmOptions(qos="high;rm"), "--qos"),
    (slurm.SlurmOptions(mem="32G\n#SBATCH --x"), "--mem"),
    (slurm.SlurmOptions(mem="lots"), "--mem"),
    (slurm.SlurmOptions(extra=("--constraint=a100\n#SBATCH --uid=0",)), "--sbatch-arg"),
    (slurm.SlurmOptions(extra=("--comment=two words",)), "--sbatch-arg"),
    (slurm.SlurmOptions(extra=("-C a100",)), "--sbatch-arg"),
    (slurm.SlurmOptions(extra=("--output=/elsewhere/%j",)), "fwbench sets itself"),
    (slurm.SlurmOptions(extra=("--array=0-999",)), "fwbench sets itself"),
])
def test_values_for_sbatch_lines_are_refused_unless_slurm_would_read_them_as_one_value(options, says):
    with pytest.raises(slurm.SlurmError, match=says):
        slurm.check_sbatch_values(options)


def test_well_formed_sbatch_values_pass():
    slurm.check_sbatch_values(slurm.SlurmOptions(partition="gpu,debug", account="proj-1", qos="normal", mem="32G",
                                                 extra=("--constraint=a100", "--exclusive", "--nice=10")))


@pytest.mark.parametrize("path, container, ok", [
    ("/shared/a b%c,d:e", "none", True), ('/shared/a"b', "none", False), ("/shared/a\\b", "none", False),
    ("/shared/a\nb", "none", False), ("/shared/a,b", "pyxis", False), ("/shared/a:b", "apptainer", False),
    ("/shared/a b%c", "pyxis", True),
])
def test_paths_the_batch_script_cannot_carry_are_refused(path, container, ok):
    if ok:
        slurm.check_paths(Path(path), Path("/data"), container)
    else:
        with pytest.raises(slurm.SlurmError, match="--out"):
            slurm.check_paths(Path(path), Path("/data"), container)


def test_status_never_writes_where_files_in_the_results_folder_point(tmp_path, monkeypatch):
    """submission.json and done/ markers sit in a folder others may write: status takes the results folder from
    where it was asked, and reads no row outside it."""
    out = tmp_path / "out"
    folder = out / slurm.SUBMISSIONS / "sub"
    (folder / "done").mkdir(parents=True)
    (folder / "logs").mkdir()
    base = CellSpec(stack="native-torch", task="bert-predict", preset="tiny", compile_mode="none",
                    data_dir=str(tmp_path), steps=5, threads=1)
    cellplan.write_plan(folder / "cells.json", [base, replace(base, repeat=1)])
    elsewhere = tmp_path / "elsewhere"
    (folder / "submission.json").write_text(json.dumps({"job_id": "42", "out": str(elsewhere)}))
    (folder / "done" / "0.json").write_text(json.dumps({"row": "../../../etc/passwd"}))
    monkeypatch.setattr(slurm, "queued", lambda job_id: {})  # Slurm no longer lists the array
    states = slurm.task_states(folder)
    assert states[0].state == "row missing" and "outside" in states[0].detail
    assert states[1].state == "cancelled"  # never started: recorded, in the results folder asked about
    assert not elsewhere.exists() and list(out.rglob("*.parquet"))
    (folder / "submission.json").write_text(json.dumps({"job_id": "42; rm -rf /"}))
    with pytest.raises(slurm.SlurmError, match="no valid job id"):
        slurm.task_states(folder)


@pytest.mark.parametrize("in_container", [False, True])
def test_a_model_files_cells_run_the_copy_in_the_submission_folder(tmp_path, in_container):
    """`fwbench slurm submit --model FILE`: the array tasks run the bytes submitted (a copy in the submission folder,
    which the nodes share and a container sees at /submission), one copy per file; an edited file is refused."""
    import hashlib

    source = tmp_path / "my_model.py"
    source.write_text("def build_model():\n    pass\n")
    sha256 = hashlib.sha256(source.read_bytes()).hexdigest()
    cell = replace(SPEC, task="my_model.py-fit-bs8", model_file=str(source), model_sha256=sha256)
    folder = tmp_path / "submission"
    frozen = slurm.freeze_model_files([cell, replace(cell, repeat=1), SPEC], folder, in_container)
    copy = folder / "models" / sha256[:16] / "my_model.py"
    assert copy.read_bytes() == source.read_bytes() and len(list((folder / "models").rglob("*.py"))) == 1
    where = f"/submission/models/{sha256[:16]}/my_model.py" if in_container else str(copy)
    assert [spec.model_file for spec in frozen] == [where, where, None]
    assert frozen[0].identity == cell.identity  # the identity is the file's SHA-256, not its path
    source.write_text("def build_model():\n    return 1\n")
    with pytest.raises(slurm.SlurmError, match="changed while the cells were planned"):
        slurm.freeze_model_files([cell], tmp_path / "another", in_container)


def test_a_cell_that_died_of_the_schedulers_signal_names_its_log_on_the_stopped_row(tmp_path):
    """Slurm signals every process of the task: when the cell dies of SIGUSR1 first, its row (read back from its file,
    `extra` as JSON text) says crashed, and run_planned_cell rewrites it as stopped, naming the cell's log. It read
    `extra` as a dict and ended in a traceback (CI, 2026-11-27, on a loaded machine); the task then left no row and
    `status` recorded a lost task under another identity beside the crashed row."""
    import signal

    from fwbench.cluster import cellplan
    from fwbench.core import results
    from fwbench.core.spec import CellSpec
    from fwbench.engines import CellOutcome, matrix

    spec = CellSpec(stack="native-torch", task="bert-predict", preset="tiny", compile_mode="none",
                    data_dir=str(tmp_path / "data"), steps=5, repeat=1)
    log = tmp_path / "cell.log"
    log.write_text("killed\n")
    record = matrix.outcome_record(spec, CellOutcome(-signal.SIGUSR1, False, log, tmp_path / "record.json"))
    row = results.read_row(results.write_new_row(spec, tmp_path / "out", record))
    assert row["error_type"] == "CellCrashed" and isinstance(row["extra"], str)
    assert cellplan.log_of(row) == str(log)
    assert cellplan.log_of({"extra": None}) is None and cellplan.log_of({"extra": "not json"}) is None


def test_a_task_killed_outright_is_recorded_under_the_identity_its_row_would_have_had(tmp_path, monkeypatch):
    """A task killed outright (SIGKILL) writes no row; `status` records it lost. That row took the plan's identity,
    without what the node decides (the device model), so it was a cell of its own beside the resubmission's ok row.
    The task now notes its completed spec as the cell starts (started/<index>.json), and status takes from it only
    the fields the node decides."""
    from fwbench.core import data
    from fwbench.core.identity import CellIdentity

    data.generate(tmp_path / "data", "tiny", 0, ["bert-predict"])
    spec = replace(SPEC, data_dir=str(tmp_path / "data"), engine="current", image_variant="host", fault="sleep:120")
    folder = tmp_path / "out" / slurm.SUBMISSIONS / "sub"
    plan = folder / "cells.json"
    cellplan.write_plan(plan, [spec])
    (folder / "done").mkdir()
    (folder / "logs").mkdir()
    (folder / "logs" / "0.out").write_text("the task's output\n")
    (folder / "submission.json").write_text(json.dumps({"job_id": "42"}))
    out = tmp_path / "out"
    task = subprocess.Popen([*FWBENCH, "slurm", "run-cell", str(plan), "--out", str(out), "--submission",
                             str(folder)], env={**os.environ, "SLURM_ARRAY_TASK_ID": "0"}, start_new_session=True)
    marker = folder / "started" / "0.json"
    deadline = time.monotonic() + 60
    while not marker.is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(task.pid, signal.SIGKILL)  # the task and its cell: no row
    task.wait(timeout=30)
    assert marker.is_file() and not list(out.rglob("*.parquet"))
    started = CellSpec.from_json(marker.read_text())
    assert started.device_model and started.device == "cpu"
    monkeypatch.setattr(slurm, "queued", lambda job_id: {})  # Slurm no longer lists the task
    [state] = slurm.task_states(folder)
    assert state.state == "error"
    [row] = [results.read_row(path) for path in out.rglob("*.parquet")]
    assert row["error_type"] == "SlurmTaskKilled" and row["device_model"] == started.device_model
    assert CellIdentity.of_row(row) == started.identity  # one cell with the rerun's row, not a second one

    # Only the node-decided fields are taken from the marker (it sits in a folder others may write).
    marker.write_text(replace(started, stack="keras3-jax", device_model="../../etc").to_json())
    assert slurm.started_spec(folder, 0, spec) == spec
    marker.write_text(replace(started, stack="keras3-jax").to_json())
    taken = slurm.started_spec(folder, 0, spec)
    assert taken.stack == spec.stack and taken.device_model == started.device_model
    marker.write_text("{not json")
    assert slurm.started_spec(folder, 0, spec) == spec
