"""fwbench slurm on a real one-node Slurm cluster (slurmctld, slurmd, munged on localhost; tests/slurm_cluster.py),
with the local engine at the tiny preset: a timeout, a cancelled task, a resubmission that completes the
matrix, and the bad inputs a user meets first."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fwbench.core import results
from tests.conftest import run_fwbench
from tests.slurm_cluster import one_node_cluster, slurm_available

pytestmark = pytest.mark.slurm

MATRIX = ["--stack", "native-torch", "--task", "bert-predict", "--preset", "tiny", "--engine", "local",
          "--cpus-per-task", "1", "--no-probe"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = slurm_available()
    if reason:
        if os.environ.get("FWBENCH_REQUIRE_SLURM") == "1":
            pytest.fail(f"FWBENCH_REQUIRE_SLURM=1 but {reason}")
        pytest.skip(reason)
    with one_node_cluster(tmp_path_factory.mktemp("slurm")) as running:
        yield running


def fwbench(cluster, *args: str):
    return run_fwbench("slurm", *args, env=cluster.env, timeout=900)


def submit(cluster, out: Path, data: Path, *args: str) -> str:
    done = fwbench(cluster, "submit", *MATRIX, "--out", str(out), "--data", str(data), *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def wait_for(cluster, out: Path, predicate, timeout_s: float = 300) -> list[str]:
    """`fwbench slurm status` lines until predicate(lines) holds."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = fwbench(cluster, "status", "--out", str(out))
        assert status.returncode == 0, status.stderr
        lines = status.stdout.splitlines()
        if predicate(lines):
            return lines
        assert time.monotonic() < deadline, status.stdout
        time.sleep(2)


def cell_processes_under(out: Path) -> int:
    """Cell processes whose spec file lies under `out` (the local engine writes it beside the cell's row)."""
    count = 0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if b"fwbench.harness.cell" in argv and any(arg.startswith(str(out).encode() + b"/") for arg in argv):
            count += 1
    return count


def wait_until(predicate, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def rows(out: Path) -> dict[int, dict]:
    found = {}
    for path in out.rglob("*.parquet"):
        row = results.read_row(path)
        assert row["repeat"] not in found, f"two rows of repeat {row['repeat']}: a rerun must replace its row"
        found[row["repeat"]] = row
    return found


def test_a_matrix_with_a_timeout_and_a_cancelled_task_is_completed_by_resubmitting(cluster, tmp_path):
    out, data = tmp_path / "results", tmp_path / "data"
    # One real cell first.
    submit(cluster, out, data)
    wait_for(cluster, out, lambda lines: any(" ok " in line for line in lines))
    assert {r: row["status"] for r, row in rows(out).items()} == {0: "ok"}

    # Three repeats: r0 has its ok row, so the array is r1 (index 0) and r2 (index 1). Both sleep past a
    # 2-minute limit; r2 is cancelled while it runs, r1 meets the limit (SIGUSR1 50 s ahead of it; Slurm checks every 30 s).
    job = submit(cluster, out, data, "--repeats", "3", "--inject-fault", "sleep:600", "--time", "2",
                 "--stop-grace", "50")
    wait_for(cluster, out, lambda lines: lines[-1].strip() == "2 RUNNING", timeout_s=120)  # the summary line
    # Slurm says RUNNING as soon as a task starts; its signal handlers are in place once its cell process runs (on a
    # loaded machine, seconds later: a SIGTERM before then ends the task without a row, as `status` says).
    wait_until(lambda: cell_processes_under(out) == 2, "both cells to start", timeout_s=120)
    cancelled = cluster.run("scancel", f"{job}_1")
    assert cancelled.returncode == 0, cancelled.stderr
    lines = wait_for(cluster, out, lambda lines: not any("RUNNING" in l or "PENDING" in l for l in lines))
    states = {r: (row["status"], row["error_type"]) for r, row in rows(out).items()}
    assert states == {0: ("ok", None), 1: ("timeout", "Stopped by SIGUSR1"), 2: ("cancelled", "Stopped by SIGTERM")}, \
        "\n".join(lines)
    assert "1 cancelled, 1 timeout" in lines[-1]

    # The resubmission runs only what has no ok row, and completes the matrix.
    submit(cluster, out, data, "--repeats", "3")
    wait_for(cluster, out, lambda lines: lines[-1].strip() == "2 ok")
    assert {r: row["status"] for r, row in rows(out).items()} == {0: "ok", 1: "ok", 2: "ok"}
    again = fwbench(cluster, "submit", *MATRIX, "--repeats", "3", "--out", str(out), "--data", str(data))
    assert again.returncode == 0 and "nothing to submit: all 3 cells have ok rows" in again.stderr

    report = run_fwbench("aggregate", str(out), "-o", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    assert "native-torch" in (tmp_path / "report" / "report.md").read_text()


def test_bad_cluster_input_is_one_line_and_loses_nothing(cluster, tmp_path):
    out, data = tmp_path / "results", tmp_path / "data"
    out.mkdir()
    keep = out / "earlier.parquet"
    keep.write_bytes(b"an earlier result")

    def refused(*args: str) -> str:
        done = fwbench(cluster, "submit", *MATRIX, "--out", str(out), "--data", str(data), *args)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        return done.stderr.strip()

    assert refused("--partition", "nosuch") == \
        f"error: unknown Slurm partition 'nosuch' (this cluster has: {cluster.partition})"
    assert refused("--gres", "gpu:1:x").startswith("error: --gres 'gpu:1:x' is malformed")
    # Well formed, but this cluster's node has no GPU: sbatch's own refusal, in one line.
    assert refused("--gres", "gpu:1").startswith("error: sbatch refused the job array: ")
    assert keep.read_bytes() == b"an earlier result"
    assert not list((out / ".slurm").glob("*/job.sbatch"))


def test_a_results_folder_the_compute_node_does_not_see_is_refused(cluster, tmp_path):
    # The node's slurmd runs in a mount namespace where this folder is a private, empty tmpfs: what a
    # node-local path (a login node's /tmp, say) looks like from a compute node.
    out = cluster.node_private / f"results-{tmp_path.name}"
    out.mkdir(parents=True)
    keep = out / "earlier.parquet"
    keep.write_bytes(b"an earlier result")
    done = run_fwbench("slurm", "submit", *[a for a in MATRIX if a != "--no-probe"], "--out", str(out),
                       "--data", str(tmp_path / "data"), "--probe-timeout", "120", env=cluster.env, timeout=600)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(f"error: the results folder {out} is not shared with the compute nodes")
    assert keep.read_bytes() == b"an earlier result"
    assert not list((out / ".slurm").glob("*/job.sbatch"))


def test_tasks_that_could_not_write_their_row_get_one_from_status(cluster, tmp_path):
    """SIGKILL (out of memory, a node failure) leaves a task no time to write; a task cancelled while
    pending never ran. `status` records both, so the matrix shows the gap and a resubmission reruns them."""
    out, data = tmp_path / "results", tmp_path / "data"
    job = submit(cluster, out, data, "--repeats", "2", "--max-running", "1", "--inject-fault", "sleep:600",
                 "--time", "10")
    wait_for(cluster, out, lambda lines: lines[-1].strip() == "1 PENDING, 1 RUNNING", timeout_s=120)
    assert cluster.run("scancel", f"{job}_1").returncode == 0
    [task] = [pid for pid, argv in processes() if "run-cell" in argv and Path(argv[0]).name.startswith("python")
              and str(out) in " ".join(argv)]
    os.kill(task, 9)
    lines = wait_for(cluster, out, lambda lines: not any("RUNNING" in l or "PENDING" in l for l in lines))
    states = {r: (row["status"], row["error_type"]) for r, row in rows(out).items()}
    assert states == {0: ("error", "SlurmTaskKilled"), 1: ("cancelled", "SlurmTaskNotStarted")}, "\n".join(lines)


def processes() -> list[tuple[int, list[str]]]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().decode().split("\0")[:-1]
        except (OSError, ValueError):
            continue
        if entry.name.isdigit() and argv:
            found.append((int(entry.name), argv))
    return found


def test_an_awkward_results_path_works_and_a_queued_array_is_not_submitted_twice(cluster, tmp_path):
    """--out with a space, '%', ',' and ':' (quoted in #SBATCH lines, '%' escaped for Slurm's file patterns);
    a resubmission while the first array is still pending (held) submits nothing."""
    out, data = tmp_path / "a b%c,d:e" / "results", tmp_path / "data"
    job = submit(cluster, out, data, "--repeats", "2", "--sbatch-arg", "--hold")
    wait_for(cluster, out, lambda lines: lines[-1].strip() == "2 PENDING", timeout_s=60)
    again = fwbench(cluster, "submit", *MATRIX, "--repeats", "2", "--out", str(out), "--data", str(data))
    assert again.returncode == 0 and "nothing to submit" in again.stderr, again.stderr
    assert len(list((out / ".slurm").glob("*/submission.json"))) == 1
    assert cluster.run("scontrol", "release", job).returncode == 0
    wait_for(cluster, out, lambda lines: lines[-1].strip() == "2 ok")
    assert {r: row["status"] for r, row in rows(out).items()} == {0: "ok", 1: "ok"}
    [folder] = (out / ".slurm").glob("*/")
    assert sorted(p.name for p in (folder / "logs").iterdir()) == ["0.out", "1.out"]
