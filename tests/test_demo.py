"""`fwbench demo`: cells at once by default (one core each), bad --parallel is one line, the report has numbers."""

from __future__ import annotations

import pytest

from fwbench.core import results
from fwbench.engines.slots import AUTO_MAX_CPU_SLOTS, usable_cpus
from tests.conftest import run_fwbench


@pytest.mark.parametrize("value, message", [("0", "--parallel must be at least 1"),
                                            ("many", "--parallel must be a positive number or auto, not 'many'"),
                                            (str(len(usable_cpus()) + 1), "needs a CPU core per cell")])
def test_a_bad_parallel_is_one_line_and_exit_2_before_any_cell(tmp_path, value, message):
    done = run_fwbench("demo", "--stack", "native-torch", "--parallel", value, "--out", str(tmp_path / "demo"))
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
    assert message in done.stderr and "Traceback" not in done.stdout + done.stderr
    assert not list(tmp_path.rglob("*.parquet"))


@pytest.mark.integration
@pytest.mark.skipif(len(usable_cpus()) < 2, reason="cells side by side need two cores")
def test_the_demo_runs_cells_side_by_side_by_default_one_core_each(tmp_path):
    out = tmp_path / "demo"
    # Four tasks (two cells a core here): every task's native-torch cell already runs in test_native_torch.py.
    tasks = ["bert-predict", "bert-fit", "gemma-fit", "mistral-generate-bs1"]
    done = run_fwbench("demo", "--stack", "native-torch", *(a for t in tasks for a in ("--task", t)), "--steps", "2",
                       "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [results.read_row(path) for path in sorted((out / "results").rglob("*.parquet"))]
    expected = min(len(usable_cpus()), AUTO_MAX_CPU_SLOTS)
    assert sorted(row["task"] for row in rows) == sorted(tasks)
    assert all(row["status"] == "ok" for row in rows), [r["error_message"] for r in rows]
    assert {row["parallel_cells"] for row in rows} == {expected} and {row["threads"] for row in rows} == {1}
    assert len({row["cpu_set"] for row in rows}) == expected  # each slot its own core
    md = (out / "report" / "report.md").read_text()
    assert "ran concurrently" in md and "‡" in md
