"""Version sweeps and bisect: sweep points in the identity, point environments, the sweep report's verdicts, and
a bisect that finds a planted change in log2 steps."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.aggregator_rows import record, samples
from fwbench.core import sweep as points
from fwbench.core.identity import CellIdentity, file_tokens
from fwbench.core import results
from fwbench.core.spec import CellSpec
from fwbench_aggregator import loading
from fwbench_aggregator import sweep as report_sweep
from fwbench.engines.local import PointUnavailable, StackEnvironment, resolver_reason, unpinned_requirements
from fwbench_aggregator.bisect import bisect

from tests.conftest import run_fwbench


def test_points_parse_and_label():
    parsed = points.parse_vary("Transformers=4.38.1, 4.38.2")
    assert [p.label for p in parsed] == ["transformers==4.38.1", "transformers==4.38.2"]
    assert points.parse_dates("2024-03-01")[0].label == "date:2024-03-01"
    assert points.date_point("2024-03-01").exclude_newer == "2024-03-02T00:00:00Z"
    assert points.parse_label("date:2024-03-01") == points.date_point("2024-03-01")
    assert points.parse_label("tqdm==4.66.1") == points.package_point("tqdm", "4.66.1")
    for bad in ("tqdm", "tqdm=", "tqdm=1.0,1.0", "../x=1", "tqdm=1.0;rm"):
        with pytest.raises(points.SweepError):
            points.parse_vary(bad)
    with pytest.raises(points.SweepError):
        points.parse_dates("2024-02-30")
    assert sorted(["x==1.10", "x==1.9", "x==1.9.1"], key=points.sort_key) == ["x==1.9", "x==1.9.1", "x==1.10"]


def test_a_point_of_a_family_member_asks_the_resolver_for_the_others_it_has():
    """jax refuses a jaxlib of another version and tensorflow-text's ops are built for one tensorflow: a point of
    one asks the resolver for the others the environment has (with the extras the stack requires them with), and
    reads their versions back; a package of no family moves nothing."""
    assert points.moves_with("JAX")[:1] == ("jaxlib",) and "jax" in points.moves_with("jaxlib")
    assert points.moves_with("tensorflow") == ("tensorflow-text",)
    assert points.moves_with("tqdm") == () and points.moves_with("torch") == ()
    asked = points.family_requirements(points.package_point("jax", "0.10.1"), ["jaxlib", "jax-cuda12-plugin"],
                                       {"jax": "[cuda12]", "jaxlib": ""})
    assert asked == ["jax[cuda12]==0.10.1", "jaxlib<=0.10.1", "jax-cuda12-plugin<=0.10.1"]
    # An old jax names no jaxlib (only its extras did): unbounded, the resolver paired jax 0.4.25 with jaxlib 0.10.2.
    assert points.family_requirements(points.package_point("jax", "0.4.25"), ["jaxlib"], {}) == [
        "jax==0.4.25", "jaxlib<=0.4.25"]
    # tensorflow-text names its tensorflow: unbounded (tensorflow 2.20.0 pairs with tensorflow-text 2.20.1).
    assert points.family_requirements(points.package_point("tensorflow", "2.20.0"), ["tensorflow-text"], {}) == [
        "tensorflow==2.20.0", "tensorflow-text"]
    compiled = ("jax==0.10.1\njax-cuda12-pjrt==0.10.1\njax-cuda12-plugin[with-cuda]==0.10.1\n"
                "jaxlib==0.10.1 ; sys_platform == 'linux'\nscipy==1.17.1\n")
    assert points.resolved_versions(compiled, ["jaxlib", "jax_cuda12_plugin"]) == {
        "jaxlib": "0.10.1", "jax-cuda12-plugin": "0.10.1"}


def test_sweep_point_is_identity_and_old_rows_read_as_none():
    spec = CellSpec("native-torch", "bert-fit", "tiny", "none", "/d", 5, sweep_point="tqdm==4.66.1")
    plain = CellSpec("native-torch", "bert-fit", "tiny", "none", "/d", 5)
    assert spec.identity != plain.identity and spec.identity.setting("sweep_point") == "tqdm==4.66.1"
    assert "at-tqdm_4.66.1" in file_tokens(spec.identity, {}) and not file_tokens(plain.identity, {})
    assert "sweep_point" not in plain.to_json()  # left out when unset: older cells still read their spec
    old_row = {k: v for k, v in record("native-torch", "bert-fit", step_ms=[1.0]).items()}
    assert CellIdentity.of_row(old_row).setting("sweep_point") is None


def test_releases_and_candidates():
    page = {"files": [{"filename": f"pkg-{v}-py3-none-any.whl"} for v in ("1.0", "1.1", "1.2rc1", "1.2", "2.0")]
            + [{"filename": "pkg-1.3.tar.gz"}, {"filename": "pkg-1.4-py3-none-any.whl", "yanked": "bad"}]}
    releases = points.releases_from_page(page)
    assert releases == ["1.0", "1.1", "1.2", "1.3", "2.0"]
    assert points.versions_between(releases, "1.1", "1.3") == ["1.1", "1.2", "1.3"]
    assert points.versions_between(releases, "1.3", "1.1") == ["1.3", "1.2", "1.1"]
    with pytest.raises(points.SweepError, match="not a release"):
        points.versions_between(releases, "1.1", "1.9")
    assert points.dates_between("2024-02-28", "2024-03-01") == ["2024-02-28", "2024-02-29", "2024-03-01"]


def test_releases_this_python_cannot_install_are_told_apart():
    """jax 0.11 needs Python 3.12 (every file's requires-python): on 3.11 it is left out, with its requirement; a
    release with one admitting file, or none stated, is kept."""
    page = {"files": [{"filename": "jax-0.10.2-py3-none-any.whl", "requires-python": ">=3.11"},
                      {"filename": "jax-0.11.0-py3-none-any.whl", "requires-python": ">=3.12"},
                      {"filename": "jax-0.11.0.tar.gz", "requires-python": ">=3.12"},
                      {"filename": "jax-0.12.0-cp313-none-any.whl", "requires-python": ">=3.13"},
                      {"filename": "jax-0.12.0-cp311-none-any.whl", "requires-python": ">=3.11"},
                      {"filename": "jax-0.12.1-py3-none-any.whl"}]}
    assert points.releases_for_python(page, "3.11.7") == (["0.10.2", "0.12.0", "0.12.1"], {"0.11.0": ">=3.12"})
    assert points.releases_for_python(page, None)[0] == points.releases_from_page(page) == [
        "0.10.2", "0.11.0", "0.12.0", "0.12.1"]


@pytest.mark.parametrize("good, bad, versions, named", [("1.0", "main", "1.0,1.1", "--bad 'main'"),
                                                         ("main", "1.1", "1.0,1.1", "--good 'main'"),
                                                         ("1.0", "1.1", "1.0,trunk,1.1", "--versions lists 'trunk'")])
def test_bisect_between_things_that_are_not_versions_is_a_one_line_error(tmp_path, good, bad, versions, named):
    with pytest.raises(points.SweepError, match=named):
        points.versions_between(versions.split(","), good, bad)
    done = run_fwbench("bisect", "--stack", "native-torch", "--task", "bert-predict", "--package", "tqdm",
                       "--good", good, "--bad", bad, "--versions", versions, "--out", str(tmp_path / "out"), timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr
    assert done.stderr.strip() == f"error: {named} is not a release version (PEP 440, e.g. 4.38.2): bisect searches " \
                                  "released versions"
    assert not (tmp_path / "out").exists()


def test_point_environment_is_keyed_by_the_point(tmp_path):
    plain = StackEnvironment("native-torch", "current", tmp_path)
    at = StackEnvironment("native-torch", "current", tmp_path, point=points.package_point("tqdm", "4.66.1"))
    other = StackEnvironment("native-torch", "current", tmp_path, point=points.package_point("tqdm", "4.67.1"))
    assert len({plain.path, at.path, other.path}) == 3 and "-at-tqdm_4.66.1-" in at.path.name
    assert resolver_reason("error: No solution found when resolving dependencies\n  cause: Because there is no "
                           "version of tqdm==99 and you require tqdm==99, we can conclude that your\n  requirements "
                           "are unsatisfiable.\n") == ("Because there is no version of tqdm==99 and you require "
                                                       "tqdm==99, we can conclude that your requirements are "
                                                       "unsatisfiable.")
    requirements = tmp_path / "r.txt"
    requirements.write_text("torch==2.2.1\ntransformers[torch]==4.38.2  # x\n-c c.txt\nfoo>=1; python_version<'4'\n")
    assert unpinned_requirements(requirements) == ["torch", "transformers[torch]", "foo; python_version<'4'"]


def _write_point(out, label, centre, repeats, rng, task="bert-predict", start=0):
    for repeat in range(start, repeats):
        rec = record("native-torch", task, repeat=repeat, step_ms=samples(rng, centre, n=10, spread=0.02),
                     sweep_point=label, sweep_installed=label)
        spec = CellSpec("native-torch", task, "tiny", "none", "/d", 10, repeat=repeat, sweep_point=label)
        results.write_new_row(spec, out, rec)


def test_sweep_report_verdicts_and_aggregate_section(tmp_path):
    rng = np.random.default_rng(1)
    out = tmp_path / "results"
    for label, centre in (("pkg==1.0", 10.0), ("pkg==1.1", 10.0), ("pkg==1.2", 20.0), ("pkg==1.10", 20.0)):
        _write_point(out, label, centre, 3, rng)
    _write_point(out, "pkg==2.0", 20.0, 1, rng)  # one repeat: no verdict
    loaded = loading.load_results([out])
    [cell] = report_sweep.cell_sweeps(loaded, 5.0)
    assert [p.label for p in cell.points] == ["pkg==1.0", "pkg==1.1", "pkg==1.2", "pkg==1.10", "pkg==2.0"]
    assert [s.verdict for s in cell.steps] == ["equivalent", "slower", "equivalent", "inconclusive"]
    assert 1.8 < cell.steps[1].ratio < 2.2 and cell.steps[1].low < cell.steps[1].ratio < cell.steps[1].high
    assert "needs 3 repeats" in cell.steps[3].detail
    report = report_sweep.write_report(loaded, tmp_path / "report")
    text = report.read_text()
    assert "pkg==1.1 → pkg==1.2: slower" in text and "equivalent within 5%" in text
    assert (tmp_path / "report" / "sweep-1.png").stat().st_size > 1000
    from fwbench_aggregator.aggregate import aggregate

    assert "## Version sweeps" in aggregate([out], tmp_path / "agg").report_md.read_text()


@pytest.mark.parametrize("planted", [1, 5, 8])
def test_bisect_finds_a_planted_version_in_log2_steps(tmp_path, planted):
    """A stand-in for the cell runner writes rows whose steps are 30% slower from the planted version on; bisect
    over 9 fake versions must bracket it, measuring the two ends and ceil(log2(8)) = 3 middle versions."""
    versions = [f"pkg=={v}" for v in ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7", "1.8")]
    rng = np.random.default_rng(planted)
    measured = []

    def measure(label, n):
        measured.append((label, n))
        centre = 13.0 if versions.index(label) >= planted else 10.0
        existing = {r["repeat"] for r in _rows(tmp_path) if r["sweep_point"] == label}
        for repeat in range(n):
            if repeat not in existing:
                _write_point(tmp_path, label, centre, repeat + 1, rng, start=repeat)

    def judge(a, b, level):
        loaded = loading.load_results([tmp_path])
        return report_sweep.judge(report_sweep.rows_at(loaded, a), report_sweep.rows_at(loaded, b), 5.0, level)[0]

    def median_of(label):
        return float(np.median(np.concatenate([r["step_ms"] for r in _rows(tmp_path) if r["sweep_point"] == label])))

    result = bisect(versions, measure, judge, median_of)
    assert result.outcome == "found" and result.direction == "slower"
    assert (result.good, result.bad) == (versions[planted - 1], versions[planted])
    assert result.environments == 2 + math.ceil(math.log2(len(versions) - 1))
    assert all(n == 3 for _, n in measured)  # clear-cut steps: no added repeats


def test_bisect_no_change(tmp_path):
    rng = np.random.default_rng(0)
    labels = ["pkg==1.0", "pkg==1.1", "pkg==1.2"]

    def measure(label, n):
        _write_point(tmp_path, label, 10.0, n, rng)

    def judge(a, b, level):
        loaded = loading.load_results([tmp_path])
        return report_sweep.judge(report_sweep.rows_at(loaded, a), report_sweep.rows_at(loaded, b), 5.0, level)[0]

    result = bisect(labels, measure, judge, lambda label: 10.0)
    assert result.outcome == "no-change" and result.environments == 2


def _rows(out):
    return [row for path in out.rglob("*.parquet") for row in pq.read_table(path).to_pylist()]


@pytest.mark.integration
def test_sweep_two_real_versions_and_an_unresolvable_one(tmp_path, shared_data):
    """End to end: keras3-jax's environment with jax at two real versions (installed over the lock from the shared
    cache, each with its own jaxlib: jax refuses another) and one that does not exist: two ok rows, each recording
    what was installed, and an error row with the resolver's reason, not a traceback. Before jax's family moved with
    it, the point that is not the lock's (0.10.1 beside jaxlib 0.10.2) was an error row."""
    out = tmp_path / "sweep"
    proc = run_fwbench("sweep", "--stack", "keras3-jax", "--task", "bert-predict", "--steps", "3", "--warmup", "0",
                       "--threads", "1", "--data", str(shared_data), "--vary", "jax=0.10.1,0.10.2,99.0.0",
                       "--out", str(out), "--history", str(tmp_path / "store"), timeout=900)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the unresolvable point is an error row
    assert "Traceback" not in proc.stdout + proc.stderr
    rows = {row["sweep_point"]: row for row in _rows(out)}
    assert set(rows) == {"jax==0.10.1", "jax==0.10.2", "jax==99.0.0"}
    for version in ("0.10.1", "0.10.2"):
        row = rows[f"jax=={version}"]
        assert row["status"] == "ok", row["error_message"]
        assert row["sweep_installed"] == f"jax=={version}; jaxlib=={version}"
        assert json.loads(row["library_versions"])["jaxlib"] == version
    failed = rows["jax==99.0.0"]
    assert failed["status"] == "error" and failed["error_type"] == "SweepPointUnavailable"
    assert "no version of jax[cpu]==99.0.0" in failed["error_message"]
    assert (out / "sweep-report" / "sweep.md").is_file()
    assert "jax==0.10.1 → jax==0.10.2" in proc.stdout
    # --history: every row of the sweep, the failed point's too, is in the store; a series over jax is one
    # environment (jaxlib is the axis).
    assert "3 new row(s), 0 already there" in proc.stdout, proc.stdout
    from fwbench_aggregator import history, history_series

    stored = history.query(tmp_path / "store")
    assert sorted(stored["sweep_point"]) == sorted(rows)
    [series] = history_series.build(stored, "version:jax")
    assert [(p.at, p.environment) for p in series.points] == [("0.10.1", ""), ("0.10.2", "")]


def test_a_sweep_point_s_cell_gets_one_gpu_not_every_gpu_of_the_host(tmp_path, monkeypatch):
    """The engine and NVML are the boundary (no GPU here): a 2-GPU host, a cell planned for one device."""
    from fwbench.engines import local, matrix, slots
    from fwbench.engines import sweep as sweep_engine

    class Engine:
        name, device = "local", "gpu"

        def image_variant(self, stack):
            return "venv-gpu"

        def device_model(self, gpu=None):
            return "NVIDIA H100 80GB HBM3"

        def prepare(self, stack, report=None):
            pass

    class Environment:
        def __init__(self, *args, **kwargs):
            pass

        def sweep_record(self):
            return {}

    given = {}
    monkeypatch.setattr(local, "local_engine", lambda *args, **kwargs: Engine())
    monkeypatch.setattr(local, "StackEnvironment", Environment)
    monkeypatch.setattr(slots, "usable_gpus", lambda: [0, 1])
    monkeypatch.setattr(matrix, "ensure_data", lambda specs: None)
    monkeypatch.setattr(matrix, "run_matrix", lambda *args, **kwargs: given.update(kwargs) or [])
    spec = CellSpec(stack="native-torch", task="bert-predict", preset="tiny", compile_mode="none",
                    data_dir=str(tmp_path), steps=1)
    point = points.package_point("transformers", "4.38.2")
    sweep_engine.run_point([spec], point, tmp_path / "out", "paper-2024", "gpu")
    assert [slot.gpus for slot in given["slots"]] == [(0,)]


def test_a_point_that_cannot_be_built_never_replaces_an_ok_row_at_it(tmp_path, monkeypatch):
    """The point's environment fails to build (the local engine is the boundary): the error row goes beside the ok
    row written there earlier; with --resume the ok row is kept and no error row is written; --no-resume replaces."""
    from fwbench.engines import local
    from fwbench.engines import sweep as sweep_engine
    from fwbench.harness.cell import base_record

    point = points.package_point("tqdm", "99.0.0")

    class Engine:
        name, device, pin_set = "local", "cpu", "current"

        def image_variant(self, stack):
            return "venv"

        def device_model(self, gpu=None):
            return "Test CPU"

        def prepare(self, stack, report=None):
            raise PointUnavailable(point, "no version of tqdm==99.0.0", tmp_path / "log")

    monkeypatch.setattr(local, "local_engine", lambda *args, **kwargs: Engine())
    out = tmp_path / "out"
    planned = CellSpec("native-torch", "bert-predict", "tiny", "none", str(tmp_path), 5)
    at_point = CellSpec("native-torch", "bert-predict", "tiny", "none", str(tmp_path), 5, sweep_point=point.label,
                        engine="local", pin_set="current", image_variant="venv", device_model="Test CPU", device="cpu")
    ok_path = results.write_row(base_record(at_point) | {"status": "ok", "ms_per_step": 1.0, "step_ms": [1.0],
                                                         "sweep_point": point.label},
                                results.readable_path(at_point, out))
    before = ok_path.read_bytes()

    [kept] = sweep_engine.run_point([planned], point, out, "current", "cpu", resume=True)
    assert kept["status"] == "ok" and ok_path.read_bytes() == before and len(list(out.rglob("*.parquet"))) == 1
    [failed] = sweep_engine.run_point([planned], point, out, "current", "cpu")
    assert failed["error_type"] == "SweepPointUnavailable" and ok_path.read_bytes() == before
    assert results.read_row(results.hashed_path(at_point, out))["status"] == "error"
    sweep_engine.run_point([planned], point, out, "current", "cpu", replace_ok=True)
    assert results.read_row(ok_path)["status"] == "error"


def test_unavailable_point_is_an_exception_with_a_reason(tmp_path):
    exc = PointUnavailable(points.package_point("tqdm", "99"), "no such version", tmp_path / "log")
    assert exc.reason == "no such version" and "tqdm==99" in str(exc)


def test_a_date_point_of_a_gpu_environment_resolves_the_cuda_builds(tmp_path):
    """Date points installed from requirements.txt whatever the variant (jax[cpu], plain tensorflow): on a GPU host
    every date point's cell was device_unavailable."""
    from fwbench.core.sweep import date_point
    from fwbench.engines.local import StackEnvironment

    point = date_point("2026-03-01")
    for stack, cuda in (("keras3-jax", "jax[cuda12"), ("keras3-tensorflow", "tensorflow[and-cuda]")):
        gpu = StackEnvironment(stack, home=tmp_path, variant="gpu", point=point).date_requirements()
        cpu = StackEnvironment(stack, home=tmp_path, variant="cpu", point=point).date_requirements()
        assert any(name.startswith(cuda) for name in gpu), gpu
        assert not any(name.startswith(cuda) for name in cpu), cpu
