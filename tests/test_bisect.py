"""`fwbench bisect`: it judges only the cell it was asked about, spends alpha over its repeated looks, and marks a
middle point placed without a test. The cell runner is replaced by a stand-in that writes synthetic rows."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.aggregator_rows import record, samples
from fwbench.core.identity import CellIdentity
from fwbench.core.results import target_path, write_row
from fwbench.core.spec import CellSpec


def _write(out, task, label, centre, repeat, rng, spread=0.01):
    rec = record("native-torch", task, repeat=repeat, step_ms=samples(rng, centre, n=10, spread=spread),
                 sweep_point=label, sweep_installed=label)
    spec = CellSpec("native-torch", task, "tiny", "none", "/d", 10, repeat=repeat, sweep_point=label)
    write_row(rec, target_path(spec, out, CellIdentity.of_row(rec)))
    return rec


def _run_bisect(monkeypatch, capsys, out, centre_of, args):
    """`fwbench bisect` in this process, with run_point writing bert-fit rows at centre_of(label) ms/step."""
    from fwbench.cli.commands import main
    from fwbench.engines import sweep as sweep_engine

    rng = np.random.default_rng(7)
    written: dict[str, list[dict]] = {}

    def run_point(specs, point, out_dir, pin_set, device, **kwargs):
        rows = written.setdefault(point.label, [])
        for spec in specs[len(rows):]:  # resume: the repeats already there are kept
            rows.append(_write(out_dir, spec.task, point.label, centre_of(point.label), spec.repeat, rng))
        return list(rows)

    monkeypatch.setattr(sweep_engine, "run_point", run_point)
    monkeypatch.setattr(sys, "argv", ["fwbench", "bisect", "--stack", "native-torch", "--task", "bert-fit",
                                      "--device", "cpu", "--out", str(out), *args])
    with pytest.raises(SystemExit) as done:
        main()
    return done.value.code, capsys.readouterr().out


def test_bisect_judges_only_its_cell_with_another_cells_rows_in_out(tmp_path, monkeypatch, capsys):
    """An earlier sweep left sam-predict rows (no change) at the same points in --out; bert-fit is 29% slower from
    tqdm 1.1 on. The bisect must judge bert-fit, not the first cell it finds."""
    out = tmp_path / "bisect"
    rng = np.random.default_rng(3)
    labels = ["tqdm==1.0", "tqdm==1.1", "tqdm==1.2"]
    for label in labels:
        for repeat in range(9):
            _write(out, "sam-predict", label, 50.0, repeat, rng, spread=0.002)
    code, printed = _run_bisect(monkeypatch, capsys, out, lambda label: 10.0 if label == "tqdm==1.0" else 12.9,
                                ["--package", "tqdm", "--versions", "1.0,1.1,1.2", "--good", "1.0", "--bad", "1.2"])
    assert code == 0, printed
    assert "changed (slower) between tqdm==1.0 and tqdm==1.1" in " ".join(printed.split()), printed
    assert "nothing to bisect" not in printed
    assert "also holds rows of 1 other cell(s)" in " ".join(printed.split())
    assert "12.9" in printed and "50.0" not in printed  # the bert-fit medians are printed, not sam-predict's
