"""Measurement logs are data: the harness benchmarks' runs are JSON files under benchmarks/results/<date>-<machine>/
(benchmarks/measurement_log.py's shape), docs/measurements.md renders them in generated blocks
(tests/test_generated_docs.py checks those), docs/development.md stays a guide, and README's status line is counted
from the GPU rows."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
MEASUREMENTS = ROOT / "docs" / "measurements.md"
# The benchmarks whose runs docs/measurements.md shows (verdict_error_rates.py's files are aggregator.md's).
HARNESS_BENCHMARKS = {"harness_noise.py", "jax_cache_ab.py", "first_contact.py", "parallel_speedup.py",
                      "verify_overhead.py", ".ci/run", "tests/rotation.py", "one-CPU verify flow"}


@pytest.fixture(autouse=True)
def benchmarks_on_path(monkeypatch):
    """The scripts import each other as siblings, as when run from benchmarks/."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))


def benchmark_module(name: str):
    """A script of benchmarks/ as a module."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def cited_files() -> list[Path]:
    """Every file a generated block of docs/measurements.md renders."""
    commands = re.findall(r"<!-- BEGIN generated: (.*?) -->", MEASUREMENTS.read_text())
    return sorted({ROOT / word for command in commands for word in command.split() if word.endswith(".json")})


def harness_logs() -> list[Path]:
    found = []
    for path in sorted(RESULTS.glob("*/*.json")):
        record = json.loads(path.read_text())
        if isinstance(record, dict) and record.get("benchmark") in HARNESS_BENCHMARKS:
            found.append(path)
    return found


def test_every_harness_run_is_a_complete_log_and_shown_on_the_measurements_page():
    logs, cited = harness_logs(), cited_files()
    assert len(logs) >= 15
    assert set(logs) == set(cited), "a run's file not on docs/measurements.md, or a cited file that is not a log"
    module = benchmark_module("measurement_log")
    for path in logs:
        record = json.loads(path.read_text())
        missing = [key for key in module.REQUIRED_KEYS if key not in record]
        assert not missing, (path, missing)
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", record["date"]) and path.parent.name.startswith(record["date"])
        assert isinstance(record.get("rows"), list) and (record["rows"] or record.get("figures")), path
        # Either the run wrote it (its commit known) or it was transcribed, which it says.
        assert record["commit"] or "transcribed from" in record.get("source", ""), path


def test_the_two_development_machines_have_distinct_folders():
    machines = {path.parent.name: json.loads(path.read_text())["machine"] for path in harness_logs()}
    newer = {name for name, machine in machines.items() if "family 26, model 2" in machine}
    older = {name for name, machine in machines.items() if machine.startswith("AMD EPYC, 2 cores")}
    assert newer and older
    assert all(name.endswith("cpu-amd-epyc-f26m2-2-cores") for name in newer)
    assert not any("f26m2" in name for name in older)


def test_every_transcribed_verdict_follows_the_benchmarks_rule():
    """A verdict the log stated is what harness_noise.py's rule gives for the interval beside it."""
    noise = benchmark_module("harness_noise")
    checked = 0
    for path in harness_logs():
        record = json.loads(path.read_text())
        if record["benchmark"] != "harness_noise.py":
            continue
        for row in record["rows"]:
            # Missing sides judged as a sure "meets", so that only the side present can differ.
            judged = {"busy_rows": 0, "spread_ratio_low": 1.0, "spread_ratio_high": 1.0, "ratio_low": 1.0,
                      "ratio_high": 1.0, **{key: value for key, value in row.items() if value is not None}}
            for key, computed in zip(("spread_ratio_verdict", "ratio_verdict"), noise.verdicts(judged)):
                stated = row.get(key)
                if stated and not stated.startswith("void") and f"{key[:-8]}_low" in row:
                    assert stated.split(" ")[0] == computed, (path.name, row, key)
                    checked += 1
    assert checked >= 50


def test_development_guide_is_short_and_holds_no_dated_measurement():
    text = (ROOT / "docs" / "development.md").read_text()
    assert len(text.encode()) <= 12_000
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "a dated figure belongs in benchmarks/results/"
    for anchor in ("## The tests", "## CI", "## First contact", "## Refreshing the lock files",
                   "## Benchmarks of the harness itself"):  # other pages link to these
        assert f"\n{anchor}\n" in text, anchor


def direct_gpu_counts() -> dict[str, tuple[int, int, str]]:
    """Per GPU: distinct cells with an ok row, ok rows and the latest date, read with pyarrow alone."""
    cells: dict[str, set] = {}
    rows: dict[str, int] = {}
    dates: dict[str, str] = {}
    for path in RESULTS.glob("*/rows/**/*.parquet"):
        for row in pq.read_table(path).to_pylist():
            if row["status"] != "ok" or row["device"] == "cpu":
                continue
            gpu = row["device_name"]
            cells.setdefault(gpu, set()).add(
                (row["task"], row["stack"], row["compile_mode"], row["precision"], row["timed_steps"]))
            rows[gpu] = rows.get(gpu, 0) + 1
            dates[gpu] = max(dates.get(gpu, ""), row["started_at"].strftime("%Y-%m-%d"))
    return {gpu: (len(cells[gpu]), rows[gpu], dates[gpu]) for gpu in cells}


def test_readme_status_line_is_counted_from_the_gpu_rows():
    status = benchmark_module("status_line")
    direct = direct_gpu_counts()
    found = status.gpu_results()
    assert direct and set(found) == set(direct)
    for gpu, (cells, ok_rows, latest) in direct.items():
        assert (len(found[gpu].cells), found[gpu].ok_rows, max(found[gpu].dates)) == (cells, ok_rows, latest)
    h100 = found["NVIDIA H100 80GB HBM3"]
    assert h100.short == "H100" and h100.page == "docs/results-h100.md"
    line = status.status_line(found)
    assert f"{direct['NVIDIA H100 80GB HBM3'][0]} cells ran on an H100: [results](docs/results-h100.md)" in line
    assert line in (ROOT / "README.md").read_text()


def test_status_line_names_each_gpu_and_its_latest_date():
    status = benchmark_module("status_line")
    a100 = status.GpuResults("NVIDIA A100-SXM4-80GB", {("t", "s", "none", None, 5)}, 1, {"2026-12-01"})
    b200 = status.GpuResults("NVIDIA B200", {("t", "s", "none", None, 5), ("u", "s", "none", None, 5)}, 2,
                             {"2026-11-30"})
    line = status.status_line({"a": a100, "b": b200})
    assert line.startswith("**Status (2026-12-01):** 2 cells ran on a B200: NVIDIA B200; 1 cell ran on an A100")


def test_machine_slug_names_the_cpu_generation():
    module = benchmark_module("measurement_log")
    assert module.machine_slug("AMD EPYC (family 26, model 2)", 2) == "cpu-amd-epyc-f26m2-2-cores"
    assert module.machine_slug("AMD EPYC (family 25, model 17)", 2) == "cpu-amd-epyc-f25m17-2-cores"
    assert module.machine_slug("Intel(R) Xeon(R) Processor", 16) == "cpu-intel-xeon-processor-16-cores"
    assert module.command_line([str(BENCHMARKS / "harness_noise.py"), "--runs", "20"]) == \
        "python benchmarks/harness_noise.py --runs 20"


def fake_noise_row(noise) -> dict:
    """A harness_noise.py row as measure_cell makes it, from made-up rounds (nothing timed)."""
    harness, plain = [1.00, 1.02, 0.99, 1.01], [1.00, 1.01, 1.00, 0.99]
    ratio, low, high = noise.ratio_interval(harness, plain)
    spread, spread_low, spread_high = noise.spread_ratio_interval(harness, plain)
    return {"stack": "native-torch", "task": "bert-predict", "runs": 4, "looks": 1, "confidence": 0.95,
            "candidate": None, "steps": 100, "warmup": 10, "compile_cache": False, "fwbench_ms": 1.005,
            "plain_ms": 1.0, "fwbench_cv": noise.cv(harness), "plain_cv": noise.cv(plain), "ratio": ratio,
            "ratio_low": low, "ratio_high": high, "spread_ratio": spread, "spread_ratio_low": spread_low,
            "spread_ratio_high": spread_high, "busy_rows": 0, "fwbench_runs_ms": harness, "plain_runs_ms": plain,
            "fwbench_runs_involuntary": [None] * 4, "plain_runs_involuntary": [None] * 4}


def test_harness_noise_json_is_a_log_that_renders_and_extends(tmp_path):
    noise, log, render = (benchmark_module(name) for name in ("harness_noise", "measurement_log",
                                                               "render_measurements"))
    parser = noise.build_parser()
    args = parser.parse_args(["--runs", "4", "--json", str(tmp_path / "harness-noise.json")])
    started = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)
    record = noise.json_record([fake_noise_row(noise)], args, started)
    log.write(args.json, record)
    written = json.loads(args.json.read_text())
    assert all(key in written for key in log.REQUIRED_KEYS)
    assert written["benchmark"] == "harness_noise.py" and written["date"] == "2026-12-01"
    assert written["utc"].startswith("09:30-") and written["machine"].endswith(" cores")
    assert written["settings"]["rounds"] == 4
    row = written["rows"][0]
    assert (row["spread_ratio_verdict"], row["ratio_verdict"]) == noise.verdicts(row)
    page = render.render(written)
    assert page.startswith("**2026-12-01 09:30-") and f"`{written['command']}`" in page
    assert "| native-torch | bert-predict | 4 | 95% |" in page
    # --extend reads the new shape as it read the bare rows of older files
    extend = parser.parse_args(["--extend", str(args.json), "--runs", "2"])
    assert list(noise.read_earlier(parser, extend)) == [("native-torch", "bert-predict")]
    (tmp_path / "old.json").write_text(json.dumps(written["rows"]))
    older = parser.parse_args(["--extend", str(tmp_path / "old.json"), "--runs", "2"])
    assert list(noise.read_earlier(parser, older)) == [("native-torch", "bert-predict")]


def test_jax_cache_ab_json_rows_render(monkeypatch):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)  # the script sets it on import; put back after
    module = benchmark_module("jax_cache_ab")
    render = benchmark_module("render_measurements")
    times = {"A": [1.0, 1.01, 0.99], "B": [1.01, 1.02, 1.0], "C": [1.0, 1.0, 1.0]}
    rows = module.json_rows(times)
    assert [row["ratio"] for row in rows] == ["loaded/compiled (B/A)", "compiled twice (C/A)"]
    assert rows[0]["value_low"] < rows[0]["value"] < rows[0]["value_high"]
    figures = module.json_figures(times, 1.5, 0.02, "0.4.30")
    table = "\n".join(render.row_table({"benchmark": "jax_cache_ab.py", "rows": rows}))
    assert "| loaded/compiled (B/A) | 1.0100 [" in table
    assert "| A: block CV | 1.0% |" in "\n".join(render.figure_table(figures))


def test_each_benchmarks_json_keys_have_columns_on_the_page():
    """The rows first_contact.py writes carry the keys its table shows."""
    render = benchmark_module("render_measurements")
    first_contact = benchmark_module("first_contact")
    shown = {column[0] for column in render.DEFAULT_COLUMNS["first_contact.py"]}
    assert set(first_contact.PHASE_KEYS) | {"stack", "total_s", "jax_cache_warm"} == shown


@pytest.mark.parametrize("verdict, shown", [("meets", ": **meets**"), ("misses (faster)", ": **misses** (faster)"),
                                            ("undecided", ": undecided"), ("void: 1 busy row", ": void: 1 busy row")])
def test_an_interval_shows_its_verdict(verdict, shown):
    render = benchmark_module("render_measurements")
    row = {"ratio": 1.0, "ratio_low": 0.95, "ratio_high": 1.05, "ratio_verdict": verdict}
    assert render.interval(row, "ratio", ".3f") == "1.000 [0.950, 1.050]" + shown


def test_targets_take_each_cells_latest_decided_run():
    render = benchmark_module("render_measurements")

    def row(utc, spread, ratio, **more):
        return {"stack": "keras3-jax", "task": "bert-fit", "runs": 20, "utc": utc, "spread_ratio": 1.0,
                "spread_ratio_low": 0.6, "spread_ratio_high": 1.4, "spread_ratio_verdict": spread, "ratio": 1.0,
                "ratio_low": 0.9, "ratio_high": 1.1, "ratio_verdict": ratio, **more}

    found = {"benchmark": "harness_noise.py", "date": "2026-12-01", "machine": "M, 2 cores", "rows": [
        row("08:00-09:00", "undecided", "undecided"), row("10:00-11:00", "meets", "undecided"),
        row("12:00-13:00", "misses", "misses", candidate="threads"),  # a candidate judges no target
        row("14:00-15:00", "void: 1 busy row(s)", "void: 1 busy row(s)")]}
    text = render.targets([found])
    assert "| keras3-jax | bert-fit | 2026-12-01 10:00 UTC |" in text
    assert "Spread: meets 1, misses 0, undecided 0; ratio: meets 0, misses 0, undecided 1 (of 1 cells)." in text


# Figures of docs/verification.md, docs/docker.md and docs/gpu-kit.md: data files rendered in generated blocks.
DOC_LOGS = {
    "verification.md": ["2026-11-25-cpu-amd-epyc-2-cores/process-spread.json",
                        "2026-11-26-cpu-amd-epyc-2-cores/verify-one-cpu-settings.json",
                        "2026-11-27-cpu-amd-epyc-2-cores/verify-one-cpu.json",
                        "2026-11-27-cpu-amd-epyc-f26m2-2-cores/verify-one-cpu.json"],
    "docker.md": ["2026-11-22-cpu-amd-epyc-2-cores/gpu-image-builds.json",
                  "2026-11-22-cpu-amd-epyc-2-cores/image-sizes.json"],
}
H100_FOLDER = RESULTS / "2026-11-26-nvidia-h100-80gb-hbm3"


@pytest.mark.parametrize("page, name", [(page, name) for page, names in DOC_LOGS.items() for name in names])
def test_a_pages_measurement_logs_are_complete_and_rendered_on_it(page, name):
    module, render = benchmark_module("measurement_log"), benchmark_module("render_measurements")
    path = RESULTS / name
    record = json.loads(path.read_text())
    assert not [key for key in module.REQUIRED_KEYS if key not in record], path
    assert path.parent.name.startswith(record["date"]) and record["rows"]
    assert record["commit"] or re.fullmatch(
        r"transcribed from docs/[\w-]+\.md at commit [0-9a-f]{7,}; the run's own output was not kept",
        record.get("source", "")), path
    assert render.render(record) in (ROOT / "docs" / page).read_text()


def test_image_sizes_json_is_a_log_that_renders(tmp_path):
    sizes, render = benchmark_module("image_sizes"), benchmark_module("render_measurements")
    args = type("Args", (), {"pin_set": "current", "variant": "cpu"})()
    rows = [{"image": "fwbench/keras3-jax:current-cpu", "image_gb": 3.39, "wheels_gb": 3.23, "ratio": 3.39 / 3.23},
            {"image": "fwbench/keras3-torch:current-cpu", "note": "not built"}]
    record = sizes.json_record(rows, args, datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc))
    assert all(key in record for key in benchmark_module("measurement_log").REQUIRED_KEYS)
    assert record["benchmark"] == "image_sizes.py" and record["settings"] == {"pin set": "current", "variant": "cpu"}
    page = render.render(record)
    assert "| fwbench/keras3-jax:current-cpu | 3.39 | 3.23 | 1.05 |  |" in page
    assert "| fwbench/keras3-torch:current-cpu |  |  |  | not built |" in page and "| worst ratio | 1.05 |" in page


def test_kit_windows_are_read_from_the_log_and_shown_on_the_gpu_kit_page():
    module = benchmark_module("kit_windows")
    found = module.windows(H100_FOLDER)
    assert len(found) >= 6
    first, second = found[0], found[1]
    assert (str(first.day), first.start, first.preflight_s, first.checks_s, first.units_span_s, first.wall_s) == \
        ("2026-11-26", "14:53:12", 51, 120, 287, 463)
    assert len(first.units) == 9 and (min(u.seconds for u in first.units), max(u.seconds for u in first.units)) == \
        (24, 50)
    assert len(second.units) == 3 and second.wall_s == 226
    # Every unit the kit's state says is done ran in some window, and the state's wall time is the log's, rounded.
    state = json.loads((H100_FOLDER / "kit-state.json").read_text())["units"]
    last = {unit.name: unit for window in found for unit in window.units}
    for name, unit in state.items():
        assert name in last and abs(last[name].seconds - unit["wall_s"]) <= 1, name
    dates = {str(window.day) for window in found}
    assert dates <= {json.loads(path.read_text())["recorded_at"][:10] for path in H100_FOLDER.glob("host*.json")}
    page = (ROOT / "docs" / "gpu-kit.md").read_text()
    assert module.window_table(found) in page
    assert module.window_table([window for window in found if window.number in (5, 6)]) in page
    assert module.unit_table(found, ".py-") in page


def test_the_weights_checksum_benchmark_writes_and_renders_its_file(tmp_path, capsys):
    """benchmarks/weights_checksum.py at a size a unit test affords: the ways of each digest agree (it exits
    otherwise), the file is a measurement log with its machine and date, and --render prints what docs/gpu-kit.md
    shows."""
    module = benchmark_module("weights_checksum")
    path = tmp_path / "weights-checksum.json"
    assert module.main(["--mib", "2", "--layers", "3", "--repeats", "1", "--json", str(path)]) == 0
    found = json.loads(path.read_text())
    assert found["benchmark"] == "weights_checksum" and found["machine"] and found["date"]
    [row] = found["rows"]
    assert row["mib"] == 2 and row["tensors"] == 4 and set(row["ways"]) == set(module.WAYS)
    assert all(seconds > 0 for seconds in row["ways"].values())
    capsys.readouterr()
    assert module.main(["--render", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "| weights (2 MiB in 4 tensors) | s | one loop / this way |" in shown
    assert "| pieces, reused buffers | " in shown and "| one loop | " in shown


def test_the_units_ahead_benchmark_is_recomputed_from_its_kit_states_and_shown_on_the_gpu_kit_page():
    """benchmarks/kit_ahead.py's table comes from each window's kit-state.json (docs/gpu-kit.md's block), and what it
    says agrees with the units' own records: every unit ok in both windows, none ahead without --prefetch, and each
    median overhead is the median of the units' wall time less what ran ahead, first step and timed steps."""
    import statistics

    module = benchmark_module("kit_ahead")
    folder = RESULTS / "2026-11-28-cpu-amd-epyc-f25m17-2-cores" / "kit-ahead"
    lines = module.table(folder)
    assert "\n".join(lines) in (ROOT / "docs" / "gpu-kit.md").read_text()
    for prefetch in (0, 3):
        state = json.loads((folder / f"prefetch-{prefetch}" / "kit-state.json").read_text())
        units = state["units"].values()
        assert all(unit["status"] == "ok" for unit in units) and len(units) == 6
        assert any(unit.get("ahead_s") for unit in units) is (prefetch > 0)
        overheads = [unit["wall_s"] - unit.get("ahead_s", 0) + unit["breakdown"]["export_s"]
                     - unit["breakdown"]["first_step_s"] - unit["breakdown"]["timed_s"] for unit in units]
        assert f"| {prefetch} | 6 of 6 | {state['windows'][-1]['wall_s']:.0f} | " \
               f"{round(statistics.median(overheads), 1)} |" in "\n".join(lines)
        measured = json.loads((folder / f"prefetch-{prefetch}" / "measurement.json").read_text())
        assert folder.parent.name.startswith(measured["date"]) and measured["machine"].endswith("2 cores")
