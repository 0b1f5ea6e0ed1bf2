"""`fwbench compare A B --across SETTING`: pairing cells whose identity differs only in named settings."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from fwbench.cli.commands import app
from fwbench.core import registry
from fwbench_aggregator import compare as cmp
from fwbench_aggregator import loading
from tests.aggregator_rows import CENTRES, record, samples, write

CELLS = {key: CENTRES[key] for key in list(CENTRES)[:4]}  # 4 cells of bert-fit
SLOWED = list(CELLS)[1]


def write_run(out, seed: int, slow: dict | None = None, repeats: int = 5, **settings):
    """Every cell of CELLS, `repeats` repeats, with the given identity settings (columns) on every row."""
    rng = np.random.default_rng(seed)
    for (stack, mode, task), centre in CELLS.items():
        factor = (slow or {}).get((stack, mode, task), 1.0)
        for repeat in range(repeats):
            write(out, record(stack, task, compile_mode=mode, repeat=repeat,
                              step_ms=samples(rng, centre * factor, 20, 0.03), **settings))
    return loading.load_results([out])


def test_current_against_paper_2024_pairs_cell_by_cell_and_says_what_differs(tmp_path):
    current = write_run(tmp_path / "current", 1)
    paper = write_run(tmp_path / "paper", 2, slow={SLOWED: 1.4}, pin_set="paper-2024")
    strict = cmp.compare(current, paper)
    assert sorted({r.verdict for r in strict}) == ["only in A", "only in B"]
    # Without --across, an unpaired cell still says why: its partner differs in pin_set.
    assert {r.unpaired_note for r in strict} == {"differs in settings not named in --across: pin_set: current -> "
                                                 "paper-2024"}
    rows = cmp.compare(current, paper, across=["pin_set"])
    assert len(rows) == len(CELLS) and all(r.paired for r in rows)
    assert {r.differs for r in rows} == {"pin_set: current -> paper-2024"}
    by_cell = {(r.variant.stack, r.variant.compile_mode, r.task): r for r in rows}
    assert by_cell[SLOWED].verdict == "slower" and by_cell[SLOWED].change_pct == pytest.approx(40, abs=6)
    assert all(r.verdict.startswith("not significant") for key, r in by_cell.items() if key != SLOWED)
    assert all("pins" not in r.variant.label for r in rows)  # the across setting is in `differs`, not the label
    assert by_cell[SLOWED].identity_b.setting("pin_set") == "paper-2024"
    # The gate works across pin sets as it does within one.
    assert [r.task for r in cmp.regressions_above(rows, 10.0)] == [SLOWED[2]]


def test_a_setting_not_named_leaves_cells_unpaired_with_the_fields_that_differ(tmp_path):
    a = write_run(tmp_path / "a", 1)
    b = write_run(tmp_path / "b", 2, pin_set="paper-2024", threads=4, image_variant="cpu", engine="docker")
    rows = cmp.compare(a, b, across=["pin_set"])
    assert len(rows) == 2 * len(CELLS) and not any(r.paired for r in rows)
    only_a = [r for r in rows if r.verdict == "only in A"]
    assert {r.differs for r in only_a} == {"differs in settings not named in --across: image_variant: venv -> cpu; "
                                           "threads: 2 -> 4"}
    # engine stands for the image variant; the engine column is named beside it.
    rows = cmp.compare(a, b, across=["pin_set", "engine", "threads"])
    assert all(r.paired for r in rows) and len(rows) == len(CELLS)
    assert {r.differs for r in rows} == {"pin_set: current -> paper-2024; image_variant: venv -> cpu; threads: 2 -> 4; "
                                         "engine: local -> docker"}


def test_exact_partners_pair_first_and_several_candidates_are_ambiguous(tmp_path):
    a = write_run(tmp_path / "a", 1, threads=1)
    write_run(tmp_path / "b" / "1", 2, threads=1)
    write_run(tmp_path / "b" / "8", 3, threads=8)
    b = loading.load_results([tmp_path / "b"])  # B has both threads=1 and threads=8
    rows = cmp.compare(a, b, across=["threads"])
    paired = [r for r in rows if r.paired]
    assert len(paired) == len(CELLS) and all(r.differences == () for r in paired)
    assert {r.verdict for r in rows if not r.paired} == {"only in B"}
    write_run(tmp_path / "c" / "4", 5, threads=4)
    write_run(tmp_path / "c" / "8", 6, threads=8)
    rows = cmp.compare(a, loading.load_results([tmp_path / "c"]), across=["threads"])
    assert not any(r.paired for r in rows)
    assert all(r.unpaired_note.startswith("ambiguous: 2 cell(s) of B differ from it only in --across settings "
                                          "(threads)") for r in rows if r.b is None)
    assert all(r.unpaired_note.startswith("ambiguous: 1 cell(s) of A") for r in rows if r.a is None)


def test_across_device_models_gives_a_ratio_not_a_verdict_and_the_gate_refuses(tmp_path):
    a100 = write_run(tmp_path / "a100", 1, device_model="NVIDIA A100", device_name="NVIDIA A100")
    h100 = write_run(tmp_path / "h100", 2, slow=dict.fromkeys(CELLS, 0.5), device_model="NVIDIA H100",
                     device_name="NVIDIA H100")
    rows = cmp.compare(a100, h100, across=["device_model"])
    assert len(rows) == len(CELLS) and all(r.paired and r.across_device_models for r in rows)
    for r in rows:
        assert r.verdict.startswith("ratio across devices 0.") and "(no verdict)" in r.verdict
        assert "faster" not in r.verdict and "slower" not in r.verdict and r.p_adjusted is None
        assert r.ratio_low < r.ratio < r.ratio_high and r.differs == "device_model: NVIDIA A100 -> NVIDIA H100"
    with pytest.raises(cmp.GateRefused, match="across device models"):
        cmp.regressions_above(rows, 10.0)
    refused = CliRunner().invoke(app, ["compare", str(tmp_path / "a100"), str(tmp_path / "h100"),
                                       "--across", "device_model", "--fail-above", "10"])
    assert refused.exit_code == 2 and "not a regression" in refused.output
    shown = CliRunner().invoke(app, ["compare", str(tmp_path / "a100"), str(tmp_path / "h100"),
                                     "--across", "device_model"])
    assert shown.exit_code == 0, shown.output
    assert "ratio across devices" in shown.output and "NVIDIA A100 -> NVIDIA" in shown.output
    assert "slower" not in shown.output and "faster" not in shown.output


def test_cli_across_pairs_and_an_unknown_name_is_one_line_exit_2(tmp_path):
    write_run(tmp_path / "a", 1)
    write_run(tmp_path / "b", 2, slow={SLOWED: 1.4}, pin_set="paper-2024")
    run = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--across", "pin_set",
                                   "--fail-above", "10"])
    assert run.exit_code == 1 and "pin_set: current -> paper-2024" in run.output
    assert "regression above 10%" in run.output and "only in" not in run.output
    plain = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert plain.exit_code == 0 and "only in A" in plain.output and "--across SETTING pairs them" in plain.output
    bad = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--across", "gpu"])
    assert bad.exit_code == 2
    [line] = bad.output.strip().splitlines()
    assert line.startswith("error: unknown --across setting 'gpu' (choose from: pin_set, jit,") and "engine" in line


def write_scaling_side(out, seed: int, devices: int, centres: dict, global_batch: int | None = None):
    """bert-fit cells of `centres` (stack -> ms) at `devices` devices, 5 repeats each (weak scaling unless
    global_batch: strong)."""
    rng = np.random.default_rng(seed)
    batch = registry.workload("bert-fit", "tiny").batch_size
    total = global_batch or batch * devices
    columns = dict(devices=devices, global_batch_setting=global_batch, per_device_batch=total // devices,
                   global_batch=total, batch_size=total)
    for stack, centre in centres.items():
        for repeat in range(5):
            write(out, record(stack, "bert-fit", repeat=repeat, step_ms=samples(rng, centre, 20, 0.03), **columns))
    return loading.load_results([out])


def test_across_device_counts_reads_speedup_and_efficiency_and_is_never_gated(tmp_path):
    """Weak scaling: native-torch perfect (the same ms/step on 2 devices: 2x the samples), keras3-jax 20% more ms/step
    on 2 devices (1.67x, 83%). ms/step alone would call keras3-jax slower and fail --fail-above 10."""
    one = write_scaling_side(tmp_path / "one", 1, 1, {"native-torch": 10.0, "keras3-jax": 12.0})
    two = write_scaling_side(tmp_path / "two", 2, 2, {"native-torch": 10.0, "keras3-jax": 14.4})
    run = CliRunner().invoke(app, ["compare", str(tmp_path / "one"), str(tmp_path / "two"), "--across", "devices",
                                   "--fail-above", "10"])
    assert run.exit_code == 0, run.output
    assert "speed-up" in run.output and "efficiency" in run.output and "slower" not in run.output
    assert "not gated" in run.output
    rows = cmp.compare(one, two, across=["devices"])
    assert len(rows) == 2 and all(r.paired and r.scaling for r in rows)
    by_stack = {r.variant.stack: r for r in rows}
    for stack, expected in (("native-torch", 2.0), ("keras3-jax", 2 / 1.2)):
        read = by_stack[stack].scaling
        assert read.kind == "weak scaling" and read.devices == (1, 2) and read.without_interval is None
        speedup, efficiency = read.speedup, read.efficiency
        assert speedup.low < expected < speedup.high and speedup.value == pytest.approx(expected, rel=0.05)
        assert (efficiency.value, efficiency.low, efficiency.high) == pytest.approx(
            (speedup.value / 2, speedup.low / 2, speedup.high / 2))
        verdict = by_stack[stack].verdict
        assert verdict.startswith("weak scaling 1 -> 2 devices: speed-up ") and "efficiency" in verdict
        assert "slower" not in verdict and "faster" not in verdict and by_stack[stack].p_adjusted is None
    assert cmp.regressions_above(rows, 10.0) == [] and cmp.regressions_above(rows, 0.0) == []


def test_across_device_counts_under_strong_scaling_compares_the_same_global_batch(tmp_path):
    batch = 2 * registry.workload("bert-fit", "tiny").batch_size
    one = write_scaling_side(tmp_path / "one", 1, 1, {"native-torch": 20.0}, global_batch=batch)
    two = write_scaling_side(tmp_path / "two", 2, 2, {"native-torch": 11.0}, global_batch=batch)
    (row,) = cmp.compare(one, two, across=["devices"])
    assert row.verdict.startswith("strong scaling 1 -> 2 devices: speed-up 1.8") and "faster" not in row.verdict
    assert row.scaling.kind == "strong scaling" and row.differs == "devices: 1 -> 2"
    assert row.scaling.speedup.value == pytest.approx(20 / 11, rel=0.05)
    assert row.scaling.efficiency.value == pytest.approx(10 / 11, rel=0.05)
