"""The fwbench command as a user meets it: bad input, failing cells, timeouts, resume.

Failure paths use the `current` engine and the hidden --inject-fault option, which acts before any
framework is imported, so these run real cell subprocesses without needing a stack environment.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dataclasses import replace

from fwbench.core import results
from fwbench.harness.cell import base_record
from fwbench.harness.envinfo import cpu_model
from fwbench.core.spec import CellSpec

FWBENCH = [sys.executable, "-m", "fwbench.cli"]


def fwbench(*args, timeout=300, env=None):
    return subprocess.run([*FWBENCH, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args, message", [
    (["--stack", "nope"], "error: unknown stack 'nope'"),
    (["--stack", "native-torch", "--task", "bert-fly"], "error: unknown task 'bert-fly'"),
    (["--stack", "native-torch", "--preset", "huge"], "error: unknown preset 'huge'"),
    (["--stack", "keras3-jax", "--compile", "reduce-overhead"], "compile mode 'reduce-overhead' is not available"),
    (["--stack", "native-torch", "--engine", "cloud"], "error: unknown engine 'cloud'"),
    (["--stack", "native-torch", "--steps", "0"], "error: --steps must be at least 1"),
    (["--stack", "keras3-jax", "--jit", "maybe"], "error: unknown --jit policy 'maybe'"),
    (["--stack", "keras3-jax", "--pin-set", "paper-2025"], "error: unknown pin set 'paper-2025'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    done = fwbench("run", *args, "--out", str(tmp_path / "r"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]  # one line
    assert message in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not (tmp_path / "r").exists()


def run_faulty(tmp_path, fault, *extra):
    out = tmp_path / "results"
    done = fwbench("run", "--stack", "native-torch", "--task", "bert-predict", "--engine", "current",
                   "--out", str(out), "--data", str(tmp_path / "data"), "--inject-fault", fault, *extra)
    rows = [results.read_row(p) for p in out.rglob("*.parquet")]
    return done, rows


def test_a_cell_that_raises_leaves_an_error_row(tmp_path):
    done, rows = run_faulty(tmp_path, "raise")
    assert done.returncode == 1
    assert "injected fault" in done.stdout and "Traceback" not in done.stdout + done.stderr
    assert len(rows) == 1 and rows[0]["status"] == "error"
    assert rows[0]["error_type"] == "RuntimeError" and "injected fault" in rows[0]["error_message"]
    assert rows[0]["input_sha256"] is None and rows[0]["task"] == "bert-predict"


def test_run_ends_with_its_summary_where_pandas_is_missing(tmp_path):
    """A stack image has fwbench's runtime, not the report's pandas: `fwbench run` there printed every row and then
    died on a ModuleNotFoundError in its summary table (`docker compose up` exits 0 all the same, so it went unseen).
    Here pandas is made unimportable in the runner (not in its cell), as in an image."""
    out = tmp_path / "results"
    args = ["run", "--stack", "native-torch", "--task", "bert-predict", "--engine", "current", "--out", str(out),
            "--data", str(tmp_path / "data"), "--inject-fault", "raise"]
    without_pandas = "\n".join([
        "import runpy, sys",
        "class NoPandas:  # an import of pandas fails as where it is not installed",
        "    def find_spec(self, name, path=None, target=None):",
        "        if name.split('.')[0] == 'pandas':",
        "            raise ModuleNotFoundError(\"No module named 'pandas'\", name='pandas')",
        "sys.meta_path.insert(0, NoPandas())",
        "sys.argv = ['fwbench', *sys.argv[1:]]",
        "runpy.run_module('fwbench.cli', run_name='__main__')"])
    done = subprocess.run([sys.executable, "-c", without_pandas, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr  # the failed cell's, not a crash
    assert "Traceback" not in done.stdout + done.stderr and "ms per step" in done.stdout, done.stdout + done.stderr
    assert [results.read_row(p)["status"] for p in out.rglob("*.parquet")] == ["error"]


def test_a_cell_over_its_timeout_is_killed_and_leaves_a_timeout_row(tmp_path):
    done, rows = run_faulty(tmp_path, "sleep:60", "--timeout", "2")
    assert done.returncode == 1
    assert "timeout" in done.stdout and "exceeded its timeout of 2 s" in done.stdout
    assert [r["status"] for r in rows] == ["timeout"]
    assert rows[0]["wall_s"] is None
    assert not list((tmp_path / "results").rglob("*.tmp"))


def voluntary_switches() -> int:
    for line in Path("/proc/thread-self/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches in /proc/thread-self/status")


@pytest.mark.skipif(not Path("/proc/thread-self/status").is_file(), reason="Linux's /proc only")
def test_the_runner_waits_for_its_cell_without_waking_up(tmp_path):
    """The runner waits for a cell blocked in the kernel: it used to poll (Popen.wait with a timeout), waking every
    50 ms for the whole cell beside the cell's threads (on a 2-core machine, a preempted OpenMP thread stalls every
    other). The timeout is a timer thread's: it still kills an overrunning cell (the test above)."""
    from fwbench.engines import launch_process

    spec = CellSpec(stack="native-torch", task="bert-predict", preset="tiny", compile_mode="none", data_dir="/d",
                    steps=1, timeout_s=60)
    before = voluntary_switches()
    outcome = launch_process([sys.executable, "-c", "import time; time.sleep(2)"], spec, tmp_path / "record.json",
                             tmp_path / "cell.log", dict(os.environ))
    woke = voluntary_switches() - before
    assert outcome.returncode == 0 and not outcome.timed_out
    assert woke <= 10, f"the runner's thread woke {woke} times in a 2 s cell"  # polling: about 45


def current_engine_spec(tmp_path, **changes) -> CellSpec:
    """The spec `fwbench run --engine current` outside an image gives a tiny cell with default options."""
    spec = CellSpec(stack="native-torch", task="bert-predict", preset="tiny", compile_mode="none",
                    data_dir=str(tmp_path / "data"), steps=5, warmup=2, threads=os.cpu_count(),
                    image_variant="host", device_model=cpu_model())
    return replace(spec, **changes)


def test_resume_skips_ok_rows_and_retries_failed_ones(tmp_path):
    out = tmp_path / "results"
    spec = current_engine_spec(tmp_path)
    ok_path = results.readable_path(spec, out)
    results.write_row(base_record(spec) | {"status": "ok", "ms_per_step": 1.5, "step_ms": [1.5]}, ok_path)
    failed = replace(spec, task="bert-fit")
    results.write_row(base_record(failed) | {"status": "error", "error_message": "x"}, results.readable_path(failed, out))
    before = ok_path.read_bytes()

    done = fwbench("run", "--stack", "native-torch", "--task", "bert-predict", "--task", "bert-fit",
                   "--engine", "current", "--out", str(out), "--data", str(tmp_path / "data"),
                   "--inject-fault", "raise", "--resume")
    assert "skip native-torch bert-predict" in done.stdout
    assert ok_path.read_bytes() == before  # untouched
    assert results.read_row(results.readable_path(failed, out))["error_message"].startswith("injected fault")
    assert len(list(out.rglob("*.parquet"))) == 2  # retried in place, never duplicated


def test_a_failed_rerun_keeps_an_older_schemas_ok_row_unless_no_resume(tmp_path):
    """An ok row of schema v7 with the same identity: --resume skips the cell; a plain run writes its failure beside
    the ok row; --no-resume replaces it."""
    from tests.test_results import write_v7_ok_row

    out = tmp_path / "results"
    spec = current_engine_spec(tmp_path)
    ok_path = results.readable_path(spec, out)
    before = write_v7_ok_row(spec, ok_path)
    run = ["run", "--stack", "native-torch", "--task", "bert-predict", "--engine", "current", "--out", str(out),
           "--data", str(tmp_path / "data"), "--inject-fault", "raise"]
    assert "skip native-torch bert-predict" in fwbench(*run, "--resume").stdout
    assert ok_path.read_bytes() == before and len(list(out.rglob("*.parquet"))) == 1
    assert fwbench(*run).returncode == 1
    assert ok_path.read_bytes() == before
    assert results.read_row(results.hashed_path(spec, out))["error_message"].startswith("injected fault")
    fwbench(*run, "--no-resume")
    assert results.read_row(ok_path)["status"] == "error"


@pytest.mark.parametrize("option, token", [(["--steps", "7"], "steps-7"), (["--tf32", "on"], "prec-tf32"), (["--precision", "bf16"], "prec-bf16"),
                                           (["--threads", "1" if os.cpu_count() > 1 else "2"], "threads-")])
def test_resume_reruns_a_cell_whose_settings_changed_and_keeps_both_rows(tmp_path, option, token):
    out = tmp_path / "results"
    spec = current_engine_spec(tmp_path)
    ok_path = results.readable_path(spec, out)
    results.write_row(base_record(spec) | {"status": "ok", "ms_per_step": 1.5, "step_ms": [1.5]}, ok_path)
    before = ok_path.read_bytes()
    done = fwbench("run", "--stack", "native-torch", "--task", "bert-predict", "--engine", "current",
                   "--out", str(out), "--data", str(tmp_path / "data"), "--inject-fault", "raise", "--resume",
                   *option)
    assert "skip" not in done.stdout and "injected fault" in done.stdout
    assert ok_path.read_bytes() == before  # the other identity's row is kept
    files = sorted(p.name for p in out.rglob("*.parquet"))
    assert len(files) == 2 and any(token in name for name in files), files


def test_a_row_of_another_identity_is_never_replaced(tmp_path):
    """Same readable name (e.g. another device or image variant): the new row gets a settings-hash name."""
    out = tmp_path / "results"
    other = current_engine_spec(tmp_path, device_model="Some Other CPU")
    taken = results.readable_path(other, out)
    results.write_row(base_record(other) | {"status": "ok", "ms_per_step": 1.5, "step_ms": [1.5]}, taken)
    before = taken.read_bytes()
    fwbench("run", "--stack", "native-torch", "--task", "bert-predict", "--engine", "current", "--out", str(out),
            "--data", str(tmp_path / "data"), "--inject-fault", "raise")
    assert taken.read_bytes() == before
    ours = current_engine_spec(tmp_path)
    hashed = results.hashed_path(ours, out)
    assert ".id-" in hashed.name and results.read_row(hashed)["status"] == "error"
    assert results.read_row(hashed)["settings_id"] == ours.identity.settings_id


def test_list_and_data_commands(tmp_path):
    listing = fwbench("list")
    assert listing.returncode == 0 and "gemma-generate-bs32" in listing.stdout
    made = fwbench("data", "--preset", "tiny", "--out", str(tmp_path))
    assert made.returncode == 0
    assert (tmp_path / "tiny" / "manifest.json").is_file()
    assert len(list(Path(tmp_path, "tiny").glob("*/*.npy"))) >= 24


@pytest.mark.parametrize("make_bad", ["under_a_file", "unwritable"])
def test_out_that_cannot_be_a_folder_is_one_line_before_any_cell(tmp_path, make_bad):
    if make_bad == "under_a_file":
        (tmp_path / "file").write_text("x")
        out = tmp_path / "file" / "results"
    else:
        if os.geteuid() == 0:
            pytest.skip("root can write anywhere")  # the under-a-file case covers the error path
        (tmp_path / "ro").mkdir(mode=0o500)
        out = tmp_path / "ro" / "results"
    done = fwbench("run", "--stack", "native-torch", "--task", "bert-predict", "--engine", "current",
                   "--out", str(out), "--data", str(tmp_path / "data"), "--inject-fault", "raise")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "cannot be used as a results folder" in done.stderr and "Traceback" not in done.stderr + done.stdout
    assert not (tmp_path / "data").exists()  # nothing ran, not even the data step


def _cell_pids(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"fwbench.harness.cell" in argv and any(marker.encode() in a for a in argv):
                pids.append(int(entry))
    return pids


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_a_cell_dies_with_its_runner_even_on_sigkill(tmp_path):
    """A runner killed mid-matrix must not leave its cell running (it would compete with the next run)."""
    import signal
    import time

    out = tmp_path / "results"
    runner = subprocess.Popen([*FWBENCH, "run", "--stack", "native-torch", "--task", "bert-predict",
                               "--engine", "current", "--out", str(out), "--data", str(tmp_path / "data"),
                               "--inject-fault", "sleep:120"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not _cell_pids(str(out)) and time.monotonic() < deadline:
            time.sleep(0.2)
        cells = _cell_pids(str(out))
        assert cells, "the cell process never started"
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=10)
        deadline = time.monotonic() + 10
        while not all(_gone(pid) for pid in cells) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(_gone(pid) for pid in cells), f"cell {cells} outlived its runner"
    finally:
        runner.kill()
        for pid in _cell_pids(str(out)):
            os.kill(pid, signal.SIGKILL)


def test_run_warns_when_the_machine_is_already_busy(tmp_path, cpu_hogs):
    """The warning names the top consumers: the two hogs here, unless other processes (a loaded CI machine's
    builds) used more, so the test checks the form of the list, not its names."""
    done = fwbench("run", "--stack", "native-torch", "--task", "bert-predict", "--engine", "current",
                   "--out", str(tmp_path / "r"), "--data", str(tmp_path / "data"), "--inject-fault", "raise")
    assert re.search(r"warning: the machine is busy \([0-9.]+ CPU cores in use by other processes: "
                     r"\S+ \d+%(, \S+ \d+%)*\)", done.stdout), done.stdout[-2000:]


def test_a_paper_2024_row_carries_its_pin_set_in_its_name_and_identity(tmp_path):
    done, rows = run_faulty(tmp_path, "raise", "--pin-set", "paper-2024")
    assert done.returncode == 1, done.stdout + done.stderr
    [row] = rows
    assert row["pin_set"] == "paper-2024" and row["status"] == "error"
    assert ".pins-paper-2024." in next((tmp_path / "results").rglob("*.parquet")).name


def test_the_current_engine_inside_an_image_refuses_another_pin_set(tmp_path):
    """An image cannot change its libraries: asking it for another pin set is one line and exit 1 (an
    engine error, like a missing image), before any cell runs."""
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"stack": "native-torch", "variant": "cpu", "pin_set": "current"}')
    env = {"FWBENCH_IMAGE_MANIFEST": str(manifest)}
    done = fwbench("run", "--stack", "native-torch", "--task", "bert-predict", "--engine", "current",
                   "--pin-set", "paper-2024", "--out", str(tmp_path / "r"), env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "this image holds the current pin set, not paper-2024" in done.stderr
    assert not list((tmp_path / "r").rglob("*.parquet"))
    # Without --pin-set the image's own pin set is used (FWBENCH_PIN_SET is the image's too).
    manifest.write_text('{"stack": "native-torch", "variant": "cpu", "pin_set": "paper-2024"}')
    done = fwbench("run", "--stack", "native-torch", "--task", "bert-predict", "--engine", "current",
                   "--out", str(tmp_path / "r"), "--data", str(tmp_path / "data"), "--inject-fault", "raise", env=env)
    [row] = [results.read_row(p) for p in (tmp_path / "r").rglob("*.parquet")]
    assert row["pin_set"] == "paper-2024" and row["image_variant"] == "cpu"


def test_the_terminal_summary_shows_busy_numbers_marked_and_prefers_quiet_rows(tmp_path):
    """fwbench run's closing table: a cell with only busy rows shows its median marked ⚠; a cell with a
    quiet row shows the quiet median alone, unmarked; the caption counts the busy rows."""
    from rich.console import Console

    from fwbench.cli.commands import _summary_table
    from fwbench.engines.matrix import CellResult

    def result(task, repeat, ms, busy):
        row = {"status": "ok", "ms_per_step": ms, "busy": busy, "parallel_cells": 1}
        return CellResult(replace(current_engine_spec(tmp_path), task=task, repeat=repeat), tmp_path, row)

    outcomes = [result("bert-predict", 0, 40.0, True), result("bert-predict", 1, 60.0, True),
                result("sam-predict", 0, 10.0, False), result("sam-predict", 1, 99.0, True)]
    console = Console(record=True, width=200)
    console.print(_summary_table(outcomes))
    text = console.export_text()
    bert = next(line for line in text.splitlines() if "bert-predict" in line)
    sam = next(line for line in text.splitlines() if "sam-predict" in line)
    assert "50.00 ⚠" in bert and "10.00" in sam and "⚠" not in sam and "99.00" not in sam
    assert "⚠ measured only on a busy machine (3 busy row(s)" in " ".join(text.split())  # the caption wraps
