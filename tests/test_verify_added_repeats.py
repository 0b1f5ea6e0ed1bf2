"""verify's family-wise slower/faster rule and the added-repeats loop: the pure core with simulated samples, and
the loop through run_matrix with a stand-in engine (no Docker)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fwbench.engines import CellOutcome, matrix
from fwbench.harness.cell import base_record
from fwbench.release.verify import published_specs, rerun_and_judge
from fwbench_aggregator import loading, verification
from tests.test_release import IMAGE, rows_in


def test_the_rule_spends_alpha_over_sides_cells_and_looks():
    one = verification.Rule()
    assert one.tost_confidence == pytest.approx(0.90) and one.claim_level == pytest.approx(0.025)
    rule = verification.Rule(cells=40, looks=3)
    assert rule.tost_confidence == pytest.approx(1 - 0.1 / 3)
    assert rule.claim_level == pytest.approx(0.05 / (2 * 40 * 3))
    assert verification.look_schedule(5, 15) == [5, 10, 15]
    assert verification.look_schedule(3, 15) == [3, 6, 9, 12, 15]
    assert verification.look_schedule(4, 10) == [4, 8, 10]
    assert verification.look_schedule(5, 5) == [5]


def test_a_cell_beyond_the_tolerance_is_slower_alone_but_inconclusive_among_40_cells():
    """B/A 1.25 whose one-sided p against +10% is about 0.004: enough for one cell (level 0.025), not for one of
    40 (level 0.000625): there it is inconclusive, and says why."""
    log_ratio, se, dof = math.log(1.25), 0.035, 6.0
    (alone,), *_ = verification.judge_arrays([log_ratio], [se], [dof], verification.Rule(cells=1))
    (among,), low, _high, p_slower, _ = verification.judge_arrays([log_ratio], [se], [dof], verification.Rule(cells=40))
    assert alone == verification.SLOWER and among == verification.INCONCLUSIVE
    assert low[0] > 1.10 and 0.000625 < p_slower[0] < 0.025
    (fast,), *_ = verification.judge_arrays([math.log(0.5)], [0.02], [8.0], verification.Rule(cells=40, looks=3))
    (same,), *_ = verification.judge_arrays([0.0], [0.01], [8.0], verification.Rule(cells=40, looks=3))
    assert (fast, same) == (verification.FASTER, verification.REPRODUCED)


def test_verify_reports_the_family_wise_level_of_a_claim(tmp_path):
    published = loading.load_results([rows_in(tmp_path, "pub", 10.0, repeats=5)])
    again = loading.load_results([rows_in(tmp_path, "again", 15.0, repeats=5)])
    cells = verification.verify(published, again, looks=3)
    assert {c.verdict for c in cells} == {verification.SLOWER}
    assert all("96.7% interval" in c.detail and "over 2 sides x 2 cell(s) x 3 look(s)" in c.detail for c in cells)
    assert all(c.interval_confidence == pytest.approx(1 - 0.1 / 3) for c in cells)


def test_honest_unequal_noise_bundles_stay_below_5_percent_false_claims():
    """A small seeded run of the benchmark's bundle part: 3x noise on the re-run, 3 v 3 and 10 v 3, with and
    without added repeats; the old per-cell rule, for contrast, does call honest cells slower or faster."""
    from benchmarks import verdict_error_rates as sim

    _, noisy_3v3, noisy_10v3 = sim.bundle_scenarios(3.0)
    rng = np.random.default_rng(30)
    for scenario in (noisy_3v3, noisy_10v3):
        for rule in ("adjusted", "added"):
            wrong = sum(sim.bundle_trial(rng, scenario, rule, 1.0, 15)[0] for _ in range(60))
            assert wrong <= 3, (scenario, rule, wrong)
    old = sum(sim.bundle_trial(rng, noisy_3v3, "old", 1.0, 15)[0] for _ in range(60))
    assert old >= 3  # about 14% of verifications
    found = sum(sim.bundle_trial(rng, noisy_10v3, "added", 1.3, 15)[2] == verification.SLOWER for _ in range(30))
    assert found >= 18  # added repeats buy the power back (about 85%)


def test_the_loop_judges_each_cell_at_most_once_per_look_and_adds_repeats_only_where_inconclusive():
    calls, added = [], []

    class Cell:
        def __init__(self, key, repeats, resolvable):
            self.key, self.rerun_repeats, self.resolvable = key, repeats, resolvable

    counts = {"quiet": 5, "noisy": 5}

    def judge():
        calls.append(dict(counts))
        return [Cell("quiet", counts["quiet"], False), Cell("noisy", counts["noisy"], counts["noisy"] < 10)]

    def add(wanted):
        added.append(wanted)
        counts.update(wanted)

    cells = verification.with_added_repeats(judge, add, [5, 10, 15], key=lambda c: c.key)
    assert added == [{"noisy": 10}] and len(calls) == 2 and not any(c.resolvable for c in cells)
    calls.clear()
    verification.with_added_repeats(judge, add, [5, 10, 15], key=lambda c: c.key, time_left=lambda: False)
    assert len(calls) == 1


class StandInEngine:
    """The engine interface run_matrix uses; each cell's per-step times come from `medians` (by task and repeat)."""
    name, device = "docker", "cpu"

    def __init__(self, pin_set: str, images: dict[str, str], medians, ran: list):
        self.pin_set, self.images, self.medians, self.ran = pin_set, images, medians, ran

    def image_variant(self, stack: str) -> str:
        return "cpu"

    def device_model(self, gpu=None) -> str:
        return "Test CPU"

    def prepare(self, stack: str) -> None:
        pass

    def run_cell(self, spec, record_path: Path, log_path: Path) -> CellOutcome:
        self.ran.append((spec.task, spec.repeat))
        centre = self.medians(spec.task, spec.repeat)
        steps = [centre * (1 + 0.001 * ((i % 3) - 1)) for i in range(spec.steps)]
        record = {**base_record(spec), "status": "ok", "ms_per_step": float(np.mean(steps)), "step_ms": steps,
                  "device_name": "Test CPU", "framework_version": "9.9", "image_digest": self.images[spec.stack],
                  "input_sha256": "f" * 64}  # the inputs the published rows read
        record_path.write_text(json.dumps(record))
        return CellOutcome(0, False, log_path, record_path, row_fields={"image_digest": self.images[spec.stack]})


def test_an_inconclusive_cell_gets_added_repeats_through_run_matrix_and_is_then_reproduced(tmp_path, monkeypatch):
    """bert-predict re-runs quietly (reproduced at once); bert-fit's first 3 re-runs spread +-10% (inconclusive),
    so it gets 3 more (new repeat indices 3-5, the first 3 resumed, not re-run) and is reproduced at the second
    look, at the level for 3 looks."""
    monkeypatch.setattr(matrix, "ensure_data", lambda specs: None)
    published = loading.load_results([rows_in(tmp_path, "pub", 10.0, repeats=5)])
    specs = published_specs(published.frame(), None, 3, tmp_path / "data")
    spread = {0: 9.0, 1: 11.0, 2: 10.0}
    ran: list = []

    def medians(task, repeat):
        return spread.get(repeat, 10.0) if task == "bert-fit" else 10.0

    cells, looks = rerun_and_judge(published, specs, tmp_path / "results",
                                   lambda pin_set, refs: StandInEngine(pin_set, refs, medians, ran), {IMAGE.reference},
                                   tolerance=10.0, fail_above=None, allow_inconclusive=False, repeats=3, max_repeats=9,
                                   max_added_s=None)
    assert looks == 3
    assert sorted(ran) == sorted([("bert-predict", r) for r in range(3)] + [("bert-fit", r) for r in range(6)])
    by_task = {c.task: c for c in cells}
    assert by_task["bert-predict"].rerun_repeats == 3 and by_task["bert-fit"].rerun_repeats == 6
    assert {c.verdict for c in cells} == {verification.REPRODUCED}, [c.detail for c in cells]
    assert all(c.interval_confidence == pytest.approx(1 - 0.1 / 3) for c in cells)
    # Without added repeats (--max-repeats = --repeats), the same first re-runs leave bert-fit inconclusive.
    again = verification.verify(published, loading.load_results([tmp_path / "results"]), looks=1)
    assert {c.task: c.verdict for c in again}["bert-fit"] == verification.REPRODUCED  # 6 repeats now on disk
    first_three = [c for c in verification.verify(
        published, loading.load_results(sorted((tmp_path / "results").rglob("bert-fit*.r[0-2].parquet"))))]
    assert first_three and first_three[0].task == "bert-fit" and first_three[0].verdict == verification.INCONCLUSIVE


def test_a_cell_whose_published_spread_the_cap_cannot_overcome_is_not_resolvable():
    """5 published repeats with a log-sd near 0.1: even 15 quiet re-runs leave the interval at 3 looks wider
    than ±10%, so added repeats would be spent for nothing; a quiet published side can still be decided, and an
    estimate beyond the band keeps a claim in view."""
    rule = verification.Rule(looks=3)
    noisy = (0.0, 0.1 ** 2, 5)
    quiet = (0.0, 0.03 ** 2, 5)
    rerun = (0.02, 0.03 ** 2, 5)
    assert not verification.decidable_by(noisy, rerun, 15, rule)
    assert verification.decidable_by(quiet, rerun, 15, rule)
    assert verification.decidable_by(noisy, (0.25, 0.03 ** 2, 5), 15, rule)
    assert verification.decidable_by(noisy, rerun, 15, verification.Rule(tolerance_pct=40, looks=3))


def spread_rows(tmp_path: Path, name: str, medians_by_task: dict[str, list[float]]) -> Path:
    from tests.aggregator_rows import record, write

    out = tmp_path / name
    for task, medians in medians_by_task.items():
        for repeat, centre in enumerate(medians):
            write(out, record("keras3-jax", task, compile_mode="xla", repeat=repeat,
                              step_ms=centre * (1 + 0.001 * np.arange(-2, 3)), device_model="Test CPU",
                              device_name="Test CPU", image_digest=IMAGE.reference, pin_set="paper-2024",
                              image_variant="cpu", engine="docker", input_sha256="f" * 64))
    return out


def test_verify_spends_no_added_repeats_on_a_cell_the_cap_cannot_decide(tmp_path, monkeypatch):
    """bert-fit was published with a spread no re-run can overcome (7-13 ms over 5 repeats): it stays at its
    first 5 re-runs, inconclusive, and says why; bert-predict (published quietly, re-run noisily) gets added
    repeats as before."""
    monkeypatch.setattr(matrix, "ensure_data", lambda specs: None)
    published = loading.load_results([spread_rows(tmp_path, "pub", {"bert-fit": [7.0, 13.0, 10.0, 8.0, 12.0],
                                                                      "bert-predict": [10.0, 10.1, 9.9, 10.0, 10.05]})])
    specs = published_specs(published.frame(), None, 5, tmp_path / "data")
    ran: list = []

    def medians(task, repeat):
        return {0: 8.8, 1: 11.2}.get(repeat, 10.0) if task == "bert-predict" else 10.0

    cells, looks = rerun_and_judge(published, specs, tmp_path / "results",
                                   lambda pin_set, refs: StandInEngine(pin_set, refs, medians, ran), {IMAGE.reference},
                                   tolerance=10.0, fail_above=None, allow_inconclusive=False, repeats=5, max_repeats=15,
                                   max_added_s=None)
    by_task = {c.task: c for c in cells}
    assert looks == 3 and by_task["bert-fit"].rerun_repeats == 5, [c.detail for c in cells]
    assert by_task["bert-fit"].verdict == verification.INCONCLUSIVE
    assert "not re-run further: even 15 re-run repeats" in by_task["bert-fit"].detail
    assert by_task["bert-predict"].rerun_repeats > 5


@pytest.mark.parametrize("args, expected", [([], 15), (["--repeats", "20"], 20), (["--max-repeats", "5"], 5)])
def test_verify_adds_repeats_by_default(tmp_path, monkeypatch, capsys, args, expected):
    """Issue 30: an inconclusive cell gets more re-runs unless the user says otherwise (--max-repeats = --repeats)."""
    import sys

    from fwbench.cli.commands import main
    from fwbench.release import verify as verify_module

    seen = {}
    monkeypatch.setattr(verify_module, "run_verify", lambda *a, **kw: seen.update(kw) or 0)
    monkeypatch.setattr(sys, "argv", ["fwbench", "verify", str(tmp_path / "b.tar.gz"), "--out", str(tmp_path / "v"),
                                      *args])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code in (0, None) and seen["max_repeats"] == expected, capsys.readouterr().err
