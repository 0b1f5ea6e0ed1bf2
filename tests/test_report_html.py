"""report.html: tables present in the HTML, plots embedded, and it renders in headless Chromium."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest

from fwbench_aggregator.aggregate import aggregate
from tests.aggregator_rows import CENTRES, record, write, write_matrix


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
                   "compile took effect", "measured order (fastest first)"):
        assert header in parser.headers, header
    assert len(parser.images) == 2 and all(src.startswith("data:image/png;base64,") for src in parser.images)


def test_html_renders_in_headless_chromium(html_report, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium not installed (Debian: apt-get install -y chromium)")
    screenshot = tmp_path / "report.png"
    run = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={screenshot}", "--window-size=1280,2000",
         html_report.report_html.resolve().as_uri()],
        capture_output=True, text=True, timeout=90)
    assert screenshot.is_file() and screenshot.stat().st_size > 0, run.stderr[-2000:]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image

    pixels = matplotlib.image.imread(screenshot)
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 50, "screenshot is blank (a single colour or nearly)"
