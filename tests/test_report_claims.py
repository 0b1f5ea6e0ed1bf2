"""The report claims only what its rows support (issue 37): a busy row that might have won is named, a tie is a
tie, a column's compile label is true of every cell in it (or the cell is marked), and the throughput-and-cost
table says what each cell processed and cost."""

from __future__ import annotations

from fwbench_aggregator.aggregate import aggregate
from tests.aggregator_rows import record, write

STEPS = 20


def cell(stack, task, centre, *, spread=0.01, repeats=3, **extra):
    rows = []
    for repeat in range(repeats):
        steps = [centre * (1 + spread * ((i * 7 + repeat * 3) % 11 - 5) / 5) for i in range(STEPS)]
        rows.append(record(stack, task, repeat=repeat, step_ms=steps, **extra))
    return rows


def line_of(md: str, task: str, table_header: str = "| task | keras3") -> str:
    table = md.split(table_header, 1)[1]
    return next(line for line in table.splitlines() if line.startswith(f"| {task} |"))


def report(tmp_path, rows) -> str:
    for row in rows:
        write(tmp_path / "res", row)
    return aggregate([tmp_path / "res"], tmp_path / "rep").report_md.read_text()


def test_a_faster_keras_cell_left_out_as_busy_is_named_beside_the_winner(tmp_path):
    """Seen in the demo: sam-fit's Keras 3 best was 'tensorflow 5.582' while keras3-jax measured 3.882, busy."""
    rows = (cell("keras3-tensorflow", "sam-fit", 5.582) + cell("native-torch", "sam-fit", 7.0)
            + cell("keras3-jax", "sam-fit", 3.882, busy=True, busy_reasons="other processes used 1.2 CPU cores"))
    best = line_of(report(tmp_path, rows), "sam-fit").split("|")[-2].strip()
    assert best.startswith("5.58") and "(tensorflow)" in best
    assert "⚠ left out: 3.882 (jax)" in best


def test_candidates_whose_intervals_cannot_be_ranked_are_a_tie(tmp_path):
    rows = (cell("keras3-jax", "bert-fit", 10.0, spread=0.2) + cell("keras3-torch", "bert-fit", 10.1, spread=0.2)
            + cell("keras3-tensorflow", "bert-fit", 30.0) + cell("native-torch", "bert-fit", 12.0))
    best = line_of(report(tmp_path, rows), "bert-fit").split("|")[-2].strip()
    assert best.startswith("cannot rank: ") and "(jax)" in best and "(torch)" in best and "tensorflow" not in best
    clear = (cell("keras3-jax", "bert-fit", 10.0) + cell("keras3-torch", "bert-fit", 20.0)
             + cell("native-torch", "bert-fit", 12.0))
    best = line_of(report(tmp_path / "clear", clear), "bert-fit").split("|")[-2].strip()
    assert best.startswith("10") and "(jax)" in best and "faster than torch" in best and "x2.00 [" in best


def test_a_cell_that_ran_without_xla_is_marked_in_its_xla_column(tmp_path):
    """keras2-tensorflow's sam-predict ran jit_compile=False as published, in the 'keras2-tensorflow [xla]' column."""
    rows = (cell("keras2-tensorflow", "sam-predict", 50.0, jit_compile=False)
            + cell("keras2-tensorflow", "bert-predict", 20.0, jit_compile=True)
            + cell("keras3-jax", "sam-predict", 30.0, jit_compile=True))
    md = report(tmp_path, rows)
    header = next(line for line in md.splitlines() if line.startswith("| task |") and "keras2-tensorflow" in line)
    column = [c.strip() for c in header.split("|")].index("keras2-tensorflow [xla]")
    assert [c.strip() for c in line_of(md, "sam-predict", header).split("|")][column].endswith("†")
    assert not [c.strip() for c in line_of(md, "bert-predict", header).split("|")][column].endswith("†")
    assert "† ran with jit_compile=False" in md


def test_the_throughput_and_cost_table_says_what_each_cell_processed_and_cost(tmp_path):
    rows = (cell("native-torch", "bert-fit", 100.0, samples_per_s=320.0, first_step_s=4.5, peak_mem_bytes=2.5e9,
                 joules_per_step=30.0)
            + cell("native-torch", "gemma-generate-bs1", 500.0, tokens_generated=10, first_step_s=2.0))
    md = report(tmp_path, rows)
    assert "### Throughput and cost (tiny)" in md
    assert "| task | variant | batch | samples/s | tokens/s | first step s | peak memory GB | J/step |" in md
    fit = next(line for line in md.splitlines() if line.startswith("| bert-fit | native-torch [none] |"))
    assert "| 320 |" in fit and "| 4.5 |" in fit and "| 2.5 |" in fit and "| 30 |" in fit
    generate = next(line for line in md.splitlines()
                    if line.startswith("| gemma-generate-bs1 | native-torch [none] |") and "—" in line)
    batch = int(generate.split("|")[3])
    assert f"| {batch * 10 * 1000 / 500:.3g} |" in generate  # the whole batch's new tokens per second


def test_html_tables_sort_without_the_network(tmp_path):
    for row in cell("native-torch", "bert-fit", 100.0) + cell("keras3-jax", "bert-fit", 50.0):
        write(tmp_path / "res", row)
    html = aggregate([tmp_path / "res"], tmp_path / "rep").report_html.read_text()
    assert "<script>" in html and 'addEventListener("click"' in html
    assert "http://" not in html.split("<script>", 1)[1] and "https://" not in html.split("<script>", 1)[1]


def test_plots_name_preset_precision_and_device_and_show_busy_bars(tmp_path, monkeypatch):
    from fwbench_aggregator import plots

    titles, hatched = [], []
    real_subplots = plots._pyplot().subplots

    def subplots(*args, **kwargs):
        fig, ax = real_subplots(*args, **kwargs)
        set_title, bar = ax.set_title, ax.bar
        ax.set_title = lambda text, **kw: titles.append(text) or set_title(text, **kw)
        ax.bar = lambda *a, **kw: hatched.append(kw.get("hatch")) or bar(*a, **kw)
        return fig, ax

    monkeypatch.setattr(plots._pyplot(), "subplots", subplots)
    rows = (cell("keras3-tensorflow", "sam-fit", 5.582) + cell("native-torch", "sam-fit", 7.0)
            + cell("keras3-jax", "sam-fit", 3.882, busy=True))
    report(tmp_path, rows)
    assert titles and all("preset tiny, precision published, on Test CPU (cpu)" in title for title in titles), titles
    assert "Keras 3 best vs each baseline, preset tiny" in " ".join(titles)
    assert "//" in hatched  # keras3-jax's busy number is drawn, hatched, not left out like a failure


def test_the_report_opens_with_what_ran(tmp_path):
    rows = (cell("native-torch", "bert-fit", 100.0, cpu_model="Test CPU")
            + cell("keras3-jax", "bert-fit", 50.0, parallel_cells=2, cpu_model="Test CPU"))
    md = report(tmp_path, rows)
    head = md.split("## Preset tiny", 1)[0]
    assert md.startswith("# fwbench report\n\n## What ran\n")  # the first thing a reader sees
    assert "- Devices: CPU only (no row ran on a GPU)" in head
    assert "- CPU: Test CPU, 2 cores; cells used 2 threads" in head
    assert "- Engine: local; image variant / environment: venv" in head
    assert "- Pin sets: current; presets: tiny" in head
    assert "- Repeats per cell: 3; up to 2 cells at once" in head
    gpu = [record("native-torch", "bert-fit", preset="paper", step_ms=[5.0] * 5, gpu_driver="580.159.04",
                  cuda_driver="13.0", device_count=1)]
    assert "- Devices: 1x NVIDIA A100-SXM4-40GB (driver 580.159.04, CUDA 13.0)" in report(tmp_path / "gpu", gpu)
