"""The identity and busy rules with real native-torch cells (tiny BERT predict, local engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fwbench.core import results
from fwbench_aggregator.aggregate import aggregate
from tests.conftest import run_fwbench

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def native_env():
    built = run_fwbench("env", "build", "native-torch")  # reused if already built
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]


def bert_predict(out: Path, data: Path, *options: str):
    done = run_fwbench("run", "--stack", "native-torch", "--task", "bert-predict", "--preset", "tiny",
                       "--data", str(data), "--out", str(out), *options)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_runs_differing_in_one_setting_keep_all_rows_and_resume_by_identity(tmp_path, shared_data, native_env):
    out = tmp_path / "results"
    for options in (["--tf32", "off"], ["--tf32", "on"], ["--threads", "1"], ["--steps", "3"]):
        bert_predict(out, shared_data, *options)
    rows = [results.read_row(p) for p in sorted(out.rglob("*.parquet"))]
    assert len(rows) == 4 and len({r["settings_id"] for r in rows}) == 4
    # This CPU has no TF32: --tf32 on (precision tf32) is an unsupported row, never a float32 row named tf32.
    assert sorted(r["status"] for r in rows) == ["ok", "ok", "ok", "unsupported"]
    assert {r["precision"] for r in rows if r["status"] == "unsupported"} == {"tf32"}

    report = aggregate([out], tmp_path / "report")
    assert report.loaded.table.num_rows == 4 and not report.loaded.notes
    # --tf32 off is the precision fp32 (one axis): a table of its own; the others share the published one.
    assert {row["precision"] for row in rows if row["status"] == "ok"} == {"fp32", "published"}
    assert {summary.precision for summary in report.summaries} >= {"fp32", "published"}
    labels = {v.label for summary in report.summaries for v in summary.variants}
    assert any("threads=1" in label for label in labels) and any("steps=3" in label for label in labels), labels

    same = bert_predict(out, shared_data, "--tf32", "off", "--resume")
    assert "skip native-torch bert-predict" in same.stdout
    changed = bert_predict(out, shared_data, "--tf32", "off", "--steps", "4", "--resume")
    assert "skip" not in changed.stdout
    assert len(list(out.rglob("*.parquet"))) == 5


def test_a_cell_beside_a_cpu_hog_is_flagged_busy_on_its_row_and_in_the_report(tmp_path, shared_data, native_env,
                                                                               cpu_hogs):
    out = tmp_path / "results"
    done = bert_predict(out, shared_data)
    assert "warning: the machine is busy" in done.stdout
    (row,) = [results.read_row(p) for p in out.rglob("*.parquet")]
    assert row["status"] == "ok" and row["busy"] is True, row["busy_reasons"]
    assert row["other_cpu_cores"] > 0.5 and 0 < row["cpu_share"] and row["load_avg_1m"] is not None
    md = aggregate([out], tmp_path / "report").report_md.read_text()
    assert "## Busy rows" in md and "other processes used" in md
