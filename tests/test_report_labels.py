"""Labels say what their numbers are of (issue 49, "Smaller, same family" and part 5 "Labels"): a cell that ran
without XLA says why, a plot's title is drawn whole (device included), the HTML table sort reads a number only
where a cell starts with one, a CPU scaling read makes no speed claim, `show` and `list` honour FWBENCH_PRESET as
`run` does, and no two sections of the sweep or scaling report carry one title for two cells."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from fwbench.core import registry
from fwbench.core.identity import CellIdentity
from fwbench_aggregator import compare as cmp
from fwbench_aggregator import document, loading, plots, scaling, stats
from fwbench_aggregator import sweep as report_sweep
from fwbench_aggregator.aggregate import aggregate
from tests.aggregator_rows import record, samples, write
from tests.test_options import commands
from tests.test_show import fwbench  # the CLI run in-process, as show's own tests run it

A100, H100 = "NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"


def cell(stack, task, centre, *, repeats=3, seed=0, **extra):
    rng = np.random.default_rng(seed)
    return [record(stack, task, repeat=repeat, step_ms=samples(rng, centre, 20, 0.02), **extra)
            for repeat in range(repeats)]


def no_xla_notes(md: str) -> list[str]:
    return [line for line in md.splitlines() if line.startswith("†")]


# --- 1. the † note says why a cell of an xla column ran without XLA -------------------------------------------------

def test_a_cell_run_with_jit_off_says_jit_off_asked_for_it_not_as_published(tmp_path):
    for row in cell("keras3-jax", "bert-predict", 30.0, jit_policy="off", jit_compile=False):
        write(tmp_path / "res", row)
    md = aggregate([tmp_path / "res"], tmp_path / "rep").report_md.read_text()
    marked = next(line for line in md.splitlines() if line.startswith("| bert-predict |"))
    assert "†" in marked
    [note] = no_xla_notes(md)
    assert "--jit off" in note and "as published" not in note, note


def test_a_cell_at_the_published_jit_that_ran_without_xla_is_as_published_beside_a_jit_off_one(tmp_path):
    rows = (cell("keras2-tensorflow", "sam-predict", 50.0, jit_compile=False)
            + cell("keras3-jax", "sam-predict", 30.0, jit_policy="off", jit_compile=False))
    for row in rows:
        write(tmp_path / "res", row)
    notes = no_xla_notes(aggregate([tmp_path / "res"], tmp_path / "rep").report_md.read_text())
    assert any("as published" in note and "--jit off" not in note for note in notes), notes
    assert any("--jit off" in note and "as published for this cell" not in note for note in notes), notes


# --- 2. plot titles are drawn whole -----------------------------------------------------------------------------

@pytest.fixture
def drawn_figures(monkeypatch):
    """The figures the charts save, kept open (instead of closed) so the test can measure what they drew."""
    plt = plots._pyplot()
    close, kept = plt.close, []
    monkeypatch.setattr(plt, "close", kept.append)
    yield kept
    for fig in kept:
        close(fig)


def titles_of(fig) -> list:
    """Every drawn title: each visible panel's and the figure's own (suptitle, one of fig.texts)."""
    return ([ax.title for ax in fig.axes if ax.get_visible() and ax.title.get_text()]
            + [text for text in fig.texts if text.get_text()])


def assert_drawn_whole(fig, *must_name: str) -> None:
    fig.canvas.draw()
    width = fig.bbox.width
    for text in titles_of(fig):
        extent = text.get_window_extent()
        assert extent.x0 >= 0 and extent.x1 <= width, (text.get_text(), extent.x0, extent.x1, width)
    words = " ".join(" ".join(text.get_text().split()) for text in titles_of(fig))
    for name in must_name:
        assert name in words, (name, words)


def test_the_ms_per_step_and_speedup_titles_are_drawn_whole_device_included(tmp_path, drawn_figures):
    """Two machines in one preset: the subject names both, far wider than one line of the figure."""
    for device, out in ((A100, "a100"), (H100, "h100")):
        extra = dict(device="cuda", device_name=device, device_model=device)
        for row in (cell("keras3-jax", "bert-fit", 20.0, **extra) + cell("native-torch", "bert-fit", 30.0, **extra)
                    + cell("keras3-tensorflow", "bert-fit", 25.0, **extra)):
            write(tmp_path / "res" / out, row)
    aggregate([tmp_path / "res"], tmp_path / "rep")
    assert len(drawn_figures) >= 2
    for fig in drawn_figures:
        assert_drawn_whole(fig, A100, H100)


def test_scaling_and_sweep_chart_titles_are_drawn_whole(tmp_path, drawn_figures):
    long_title = f"stable_diffusion-fit (paper, pins=paper-2024, jit=off, threads=16) on {H100}"
    panel = plots.ScalingPanel(long_title, no_speed_claim=False,
                               series={"native-torch [none]": [(1, 1.0, None), (2, 1.9, (1.8, 2.0))]})
    plots.scaling_chart([panel], tmp_path / "scaling.png")
    sweep_cell = report_sweep.CellSweep(
        CellIdentity.of_row(record("native-torch", "stable_diffusion-fit", preset="paper", step_ms=[1.0])),
        f"native-torch [none] stable_diffusion-fit (paper), device={H100}, pins=paper-2024, threads=16",
        [report_sweep.PointResult(label, label, estimate_around(centre)) for label, centre in (("x==1", 10.0),
                                                                                                ("x==2", 11.0))],
        [])
    report_sweep.sweep_chart(sweep_cell, tmp_path / "sweep.png")
    assert len(drawn_figures) == 2
    assert_drawn_whole(drawn_figures[0], H100)
    assert_drawn_whole(drawn_figures[1], H100)


def estimate_around(centre: float) -> stats.Estimate:
    rng = np.random.default_rng(0)
    return stats.estimate([samples(rng, centre, 20, 0.02) for _ in range(3)])


# --- 3. the HTML table sort reads a number only at a cell's start --------------------------------------------------

SORT_CELLS = ["10.1 [9.8–10.4]", "— (no keras2-tensorflow [xla] cell)", "3.5 [3.4–3.6]", "x1.32 [1.10–1.58]",
              "+46%", "-5%", "cannot rank: 10 (jax), 10.1 (torch)"]
# Numbers first, by value; then text, as text ("c" before "—").
SORTED_UP = ["-5%", "x1.32 [1.10–1.58]", "3.5 [3.4–3.6]", "10.1 [9.8–10.4]", "+46%",
             "cannot rank: 10 (jax), 10.1 (torch)", "— (no keras2-tensorflow [xla] cell)"]


def test_the_html_sort_script_sorts_a_text_cell_after_the_numbers(tmp_path):
    """Runs the report's inline script in node against a stand-in table and clicks its header."""
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("node not installed")
    harness = """
var handlers = [], order = [];
var th = {dataset: {}, style: {}, addEventListener: function (kind, f) { handlers.push(f); }};
var rows = %s.map(function (text) { return {cells: [{textContent: text}]}; });
var table = {querySelectorAll: function () { return [th]; },
             tBodies: [{rows: rows, appendChild: function (row) { order.push(row.cells[0].textContent); }}]};
var document = {querySelectorAll: function () { return [table]; }};
%s
handlers[0]();
console.log(JSON.stringify(order));
""" % (json.dumps(SORT_CELLS), document._SORT_JS)
    script = tmp_path / "sort.js"
    script.write_text(harness)
    done = subprocess.run([node, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == SORTED_UP


def test_the_sort_number_pattern_reads_a_leading_number_only():
    def key(text):
        found = re.match(document.SORT_NUMBER, text.strip())
        return float(found.group(1)) if found else None

    assert [key(text) for text in SORT_CELLS] == [10.1, None, 3.5, 1.32, 46.0, -5.0, None]
    assert key("1.00x [0.98–1.02]") == 1.0 and key("99% [98–100%]") == 99.0 and key("xla") is None
    assert json.dumps(document.SORT_NUMBER) in document._SORT_JS  # the script uses this very pattern


# --- 4. a CPU scaling read makes no speed claim ---------------------------------------------------------------------

def write_scaling_side(out, devices: int, centre: float, **extra):
    batch = registry.workload("bert-fit", "tiny").batch_size * devices
    rng = np.random.default_rng(devices)
    for repeat in range(5):
        write(out, record("native-torch", "bert-fit", repeat=repeat, step_ms=samples(rng, centre, 20, 0.03),
                          devices=devices, per_device_batch=batch // devices, global_batch=batch, batch_size=batch,
                          **extra))
    return loading.load_results([out])


def test_a_scaling_read_of_cpu_rows_makes_no_speed_claim(tmp_path):
    one, two = write_scaling_side(tmp_path / "one", 1, 10.0), write_scaling_side(tmp_path / "two", 2, 10.0)
    (row,) = cmp.compare(one, two, across=["devices"])
    on_cpu = cmp.scaling_read(row, on_cpu=True)
    assert "speed-up" in on_cpu.text() and "no speed claim (CPU: logical devices share the cores)" in on_cpu.text()
    assert "no speed claim" not in cmp.scaling_read(row, on_cpu=False).text()
    assert "no speed claim" not in cmp.scaling_read(row).text()  # GPU rows, or a caller that does not know


# --- 5. show and list honour FWBENCH_PRESET ------------------------------------------------------------------------



def test_show_and_list_read_the_preset_from_fwbench_preset_as_run_does(monkeypatch, capsys):
    monkeypatch.setenv("FWBENCH_PRESET", "paper")
    code, out, err = fwbench(monkeypatch, capsys, "show", "native-torch", "bert-fit")
    assert code == 0, err
    assert "preset paper" in out.splitlines()[0]
    assert f"batch size: {registry.workload('bert-fit', 'paper').batch_size}" in out
    code, out, err = fwbench(monkeypatch, capsys, "list")
    assert code == 0, err
    assert "preset 'paper'" in out
    code, out, _ = fwbench(monkeypatch, capsys, "show", "native-torch", "bert-fit", "--preset", "small")
    assert code == 0 and "preset small" in out.splitlines()[0]  # the command line beats the environment
    monkeypatch.setenv("FWBENCH_PRESET", "huge")
    code, _, err = fwbench(monkeypatch, capsys, "list")
    assert code == 2 and "unknown preset 'huge'" in err


def test_every_preset_option_reads_fwbench_preset():
    without = [" ".join(path) for path, command in commands() for param in command.params
               if param.name == "preset" and param.envvar != "FWBENCH_PRESET"]
    assert not without, without


# --- 6. section titles name every setting that tells their cells apart ---------------------------------------------

def test_sweep_sections_of_two_machines_carry_two_titles(tmp_path):
    for device, out in ((A100, "a100"), (H100, "h100")):
        for label, centre in (("pkg==1.0", 10.0), ("pkg==1.1", 10.5)):
            for row in cell("keras3-jax", "bert-fit", centre, device="cuda", device_name=device, device_model=device,
                            sweep_point=label, sweep_installed=label):
                write(tmp_path / "res" / out / label, row)
    found = report_sweep.cell_sweeps(loading.load_results([tmp_path / "res"]))
    labels = [c.label for c in found]
    assert len(found) == 2 and len(set(labels)) == 2, labels
    assert any(A100 in label for label in labels) and any(H100 in label for label in labels), labels


def test_sweep_section_titles_name_no_setting_that_all_cells_share(tmp_path):
    for row in cell("keras3-jax", "bert-fit", 10.0, sweep_point="pkg==1.0", sweep_installed="pkg==1.0"):
        write(tmp_path / "res", row)
    [found] = report_sweep.cell_sweeps(loading.load_results([tmp_path / "res"]))
    assert found.label == "keras3-jax [xla] bert-fit (tiny)"


def test_scaling_rows_and_panels_of_two_machines_read_apart(tmp_path):
    folders = []
    for device, out in ((A100, "a100"), (H100, "h100")):
        extra = dict(device="cuda", device_name=device, device_model=device)
        for devices in (1, 2):
            write_scaling_side(tmp_path / out / str(devices), devices, 10.0, **extra)
            folders.append(tmp_path / out / str(devices))
    found = scaling.cells(loading.load_results(folders).frame())
    labels = [tuple(row[:5]) for row in scaling.table_rows(found)]  # task, stack, preset, settings, devices
    assert len(labels) == 4 and len(set(labels)) == 4, labels
    panels = scaling.chart_panels(found)
    assert len({panel.title for panel in panels}) == len(panels) == 2
