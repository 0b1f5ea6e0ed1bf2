"""report.html: tables present in the HTML, plots embedded, and it renders in headless Chromium."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest

from fwbench_aggregator.aggregate import aggregate
from tests.aggregator_rows import CENTRES, record, samples, write, write_matrix


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables = 0
        self.headers: list[str] = []
        self.images: list[str] = []
        self._in_th = False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables += 1
        elif tag == "th":
            self._in_th = True
            self.headers.append("")
        elif tag == "img":
            self.images.append(dict(attrs).get("src", ""))

    def handle_endtag(self, tag):
        if tag == "th":
            self._in_th = False

    def handle_data(self, data):
        if self._in_th:
            self.headers[-1] += data


@pytest.fixture(scope="module")
def html_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("html")
    write_matrix(root / "res", CENTRES, repeats=2, steps=10)
    write(root / "res", record("keras3-torch", "gemma-fit", status="timeout", error_message="cell exceeded 900 s",
                               timed_steps=10))
    return aggregate([root / "res"], root / "report")


def test_html_contains_the_tables_and_embedded_plots(html_report):
    parser = _Collector()
    parser.feed(html_report.report_html.read_text())
    assert parser.tables >= 5  # ms/step, speed-up, ranking, status, environments, rows
    for header in ("Keras 3 best", "native-torch [none]", "Keras 3 best vs PyTorch compiled", "timeout",
                   "compile took effect"):
        assert header in parser.headers, header
    assert len(parser.images) == 2 and all(src.startswith("data:image/png;base64,") for src in parser.images)


def _screenshot(report_html, tmp_path, height: int = 2000) -> np.ndarray:
    """report.html rendered by headless Chromium, as an RGB(A) pixel array."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium not installed (Debian: apt-get install -y chromium)")
    screenshot = tmp_path / "report.png"
    run = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={screenshot}", f"--window-size=1280,{height}",
         report_html.resolve().as_uri()],
        capture_output=True, text=True, timeout=90)
    assert screenshot.is_file() and screenshot.stat().st_size > 0, run.stderr[-2000:]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image

    return matplotlib.image.imread(screenshot)


def test_html_renders_in_headless_chromium(html_report, tmp_path):
    pixels = _screenshot(html_report.report_html, tmp_path)
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 50, "screenshot is blank (a single colour or nearly)"


@pytest.fixture(scope="module")
def busy_report(tmp_path_factory):
    """Every row busy, as on a shared 2-core machine: 40 busy rows, one reason line each."""
    root = tmp_path_factory.mktemp("busy")
    rng = np.random.default_rng(1)
    for (stack, mode, task), centre in CENTRES.items():
        for r in range(4):
            write(root / "res", record(stack, task, compile_mode=mode, repeat=r,
                                       step_ms=samples(rng, centre, 10), busy=True,
                                       busy_reasons=f"other processes used 1.{r}0 CPU cores while the cell was timed"))
    return aggregate([root / "res"], root / "report")


def test_a_busy_report_shows_numbers_marked_and_folds_the_busy_list(busy_report):
    md = busy_report.report_md.read_text()
    rows = busy_report.loaded.table.num_rows
    before_tables = md.split("### ms per step")[0]
    # The top of the report is one warning line, not a line per busy row.
    assert "other processes used" not in before_tables
    assert f"Busy rows and why: {rows}, listed at the end." in before_tables
    listed = md.split("## Busy rows and why\n")[-1].strip().splitlines()
    assert len(listed) == rows and all(line.startswith("- ⚠ ") and "other processes used" in line for line in listed)
    bert = next(line for line in md.splitlines() if line.startswith("| bert-fit |"))
    assert bert.count("⚠") >= 5 and "busy" not in bert  # numbers, marked, in every variant column
    (summary,) = busy_report.summaries
    assert not summary.estimates and summary.keras3_best("bert-fit") is None  # ranked and compared nowhere
    speedups = next(line for line in md.split("### Speed-up")[1].splitlines() if line.startswith("| bert-fit |"))
    assert set(speedups.strip("| ").split(" | ")[1:]) == {"—"}
    html = busy_report.report_html.read_text()
    assert html.count("<details>") >= 2 and f"<summary>Busy rows and why ({rows})</summary>" in html
    assert html.index("Busy rows and why") < html.index("ms per step (tiny)")


def test_the_busy_list_is_folded_when_rendered(busy_report, tmp_path):
    """Rendered, the folded list takes no room: the top of the page reaches the numbers' table."""
    html = busy_report.report_html
    folded = _screenshot(html, tmp_path / "folded", height=900)
    unfolded_html = tmp_path / "unfolded.html"
    unfolded_html.write_text(html.read_text().replace("<details>", "<details open>"))
    unfolded = _screenshot(unfolded_html, tmp_path / "unfolded", height=900)
    # Count the warning-coloured pixels (#fff4e0 background) in the first 900 px: the open list is a long
    # warning block, the folded one a single summary line.
    def warning_pixels(pixels):
        rgb = (pixels[..., :3] * 255).round()
        return int(np.all(np.abs(rgb - [255, 244, 224]) <= 2, axis=-1).sum())

    assert warning_pixels(unfolded) > 3 * warning_pixels(folded) > 0
