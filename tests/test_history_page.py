"""The results history page (issue 52, part 4): `fwbench history page` writes one self-contained HTML page of every
cell's series, plotted over date (and over a package's versions), with the judge's changes marked, points that decide
nothing labelled, every row string escaped, and it renders in headless Chromium without a script error. Rows are
written by the project's own writer (tests/aggregator_rows.py) and added to a store as tests/test_history.py does."""

from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from fwbench_aggregator import history, history_page
from tests.aggregator_rows import LIBRARY_VERSIONS, record, samples, write

DAY0 = dt.datetime(2026, 10, 1, 3, 0, tzinfo=dt.timezone.utc)
HOSTILE = '<script>window.HOSTILE = 1</script><img src=x onerror="alert(1)">'
JAX_CELL = "keras3-jax.bert-fit.tiny.compile-xla"
TORCH_CELL = "keras3-torch.bert-fit.tiny.compile-none"


def make_store(root: Path) -> Path:
    """Two cells. keras3-jax: 30 nights of 3 processes with a planted 15% step at night 17 and a new torch version
    from then on; one row carries a hostile host name. keras3-torch: 6 nights, one with a single process (decides
    nothing), one with busy rows only."""
    rng = np.random.default_rng(52)
    centres = 20.0 * np.exp(rng.normal(0, 0.02, 30)) * np.where(np.arange(30) >= 17, 1.15, 1.0)
    for day, centre in enumerate(centres):
        versions = {**LIBRARY_VERSIONS, "torch": "2.2.1" if day < 17 else "2.3.0"}
        for repeat in range(3):
            extra = {"hostname": HOSTILE} if (day, repeat) == (5, 0) else {"hostname": "night-runner"}
            write(root / "res" / f"d{day}", record("keras3-jax", "bert-fit", repeat=repeat,
                                                  step_ms=samples(rng, centre, 20, 0.01), library_versions=versions,
                                                  started_at=DAY0 + dt.timedelta(days=day, seconds=repeat), **extra))
    for day in range(6):
        for repeat in range(1 if day == 4 else 3):
            write(root / "res" / f"t{day}", record("keras3-torch", "bert-fit", compile_mode="none", repeat=repeat,
                                                  step_ms=samples(rng, 60.0, 20, 0.02),
                                                  started_at=DAY0 + dt.timedelta(days=day, seconds=repeat),
                                                  busy=day == 2, busy_reasons="load" if day == 2 else None))
    history.add(root / "store", [root / "res"])
    return root / "store"


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("history-page")
    store = make_store(root)
    return history_page.write_page(history.query(store), root / "page", by_values=["version:torch"], store=store)


class _Text(HTMLParser):
    """The page's visible text (no script or style) and its images."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.images: list[str] = []
        self.scripts: list[str] = []
        self._skip = None

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip = tag
        if tag == "img":
            self.images.append(dict(attrs).get("src", ""))

    def handle_endtag(self, tag):
        if tag == self._skip:
            self._skip = None

    def handle_data(self, data):
        (self.scripts if self._skip == "script" else self.text if self._skip is None else []).append(data)


def parsed(page: Path) -> _Text:
    parser = _Text()
    parser.feed(page.read_text())
    return parser


def test_the_page_has_a_section_per_cell_a_plot_per_axis_and_the_header(page):
    assert page.name == "index.html"
    found = parsed(page)
    text = " ".join(found.text)
    assert f"{JAX_CELL} (settings" in text and f"{TORCH_CELL} (settings" in text
    assert "106 row(s), 2 cell(s)" in text and "ruptures PELT" in text and "history store" in text
    # Self-contained: every plot embedded. Two cells by date, each by torch version too.
    assert len(found.images) == 4 and all(src.startswith("data:image/png;base64,") for src in found.images)
    assert text.count("by date") >= 2 and text.count("by torch version") >= 2


def test_the_change_is_marked_and_the_rows_provenance_listed(page):
    text = " ".join(parsed(page).text)
    assert re.search(r"Change at 2026-10-18 \(torch 2\.3\.0\): x1\.1\d\d slower", text), text[:3000]
    assert "x1.1" in text and "slower" in text
    assert "night-runner" in text and "device_model Test CPU" in text and "0.1.0" in text  # machine, fwbench
    assert "2026-10-18 03:00:00 to 03:00:02" in text  # the point's rows' start times
    assert "keras3-jax/bert-fit.compile-xla.r0.parquet" in text  # its source files


def test_points_that_decide_nothing_or_are_busy_only_are_labelled(page):
    text = " ".join(parsed(page).text)
    assert "decides nothing (fewer than 3 quiet processes)" in text
    assert "busy only" in text and "1 point(s) with busy rows only: not plotted" in text


def test_row_strings_are_escaped(page):
    source = page.read_text()
    assert HOSTILE not in source and "<img src=x" not in source
    assert "&lt;script&gt;window.HOSTILE = 1&lt;/script&gt;" in source
    found = parsed(page)
    assert all("HOSTILE" not in script for script in found.scripts)
    assert HOSTILE in " ".join(found.text)  # shown as text


def test_the_axes_are_date_first_once_each_and_a_bad_by_is_refused():
    assert history_page.axes_of([]) == ["date"]
    assert history_page.axes_of(["version:torch", "date", "version:torch"]) == ["date", "version:torch"]
    from fwbench_aggregator.history_series import SeriesError

    with pytest.raises(SeriesError):
        history_page.axes_of(["commit"])


# --- the command line -----------------------------------------------------------------------------------------------

def fwbench(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fwbench.cli", "history", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_history_page_from_the_command_line(tmp_path):
    from typer.testing import CliRunner

    from fwbench.cli.commands import app

    store = make_store(tmp_path)
    done = CliRunner().invoke(app, ["history", "page", "--store", str(store), "-o", str(tmp_path / "out"),
                                    "--stack", "keras3-torch", "--by", "date", "--by", "version:torch"])
    assert done.exit_code == 0, done.output
    assert done.output.strip() == str(tmp_path / "out" / "index.html")
    text = " ".join(parsed(tmp_path / "out" / "index.html").text)
    assert TORCH_CELL in text and JAX_CELL not in text and "by torch version" in text


@pytest.mark.parametrize("args, code, message", [
    (["--stack", "nope"], 2, "unknown stack 'nope'"),
    (["--by", "commit"], 2, "--by must be 'date' or 'version:PACKAGE'"),
    ([], 2, "holds no rows yet"),
])
def test_bad_input_is_one_line_and_non_zero(tmp_path, args, code, message):
    done = fwbench("page", "--store", tmp_path / "store", "-o", tmp_path / "out", *args)
    assert done.returncode == code and "Traceback" not in done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and done.stderr.startswith("error: ")
    assert message in done.stderr and not (tmp_path / "out").exists()


def test_a_selection_the_store_has_no_rows_of_is_one_line_and_non_zero(tmp_path):
    write(tmp_path / "res", record("keras3-jax", "bert-fit", step_ms=[20.0] * 5))
    history.add(tmp_path / "store", [tmp_path / "res"])
    done = fwbench("page", "--store", tmp_path / "store", "-o", tmp_path / "out", "--task", "sam-predict")
    assert done.returncode == 1 and done.stderr.strip() == (f"error: the history store {tmp_path / 'store'} holds "
                                                            "no rows of task sam-predict")


# --- rendered -------------------------------------------------------------------------------------------------------

def test_the_page_renders_in_headless_chromium_without_a_script_error(page, tmp_path):
    """Chromium loads the page, runs its scripts (the page's own marks <body>; the table sorter titles each header)
    with nothing on the console (an uncaught error is logged there), and draws a page that is not blank."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium not installed (Debian: apt-get install -y chromium)")
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*flags, "--dump-dom", page.resolve().as_uri()], capture_output=True, text=True, timeout=90)
    assert f'{history_page.RENDERED_ATTRIBUTE}="rendered"' in dom.stdout, dom.stderr[-2000:]
    assert 'title="sort"' in dom.stdout  # the report's table sorter ran too
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    assert "window.HOSTILE" not in dom.stdout.replace("&lt;script&gt;window.HOSTILE", "")  # never a script

    screenshot = tmp_path / "page.png"
    shot = subprocess.run([*flags, f"--screenshot={screenshot}", "--window-size=1280,2400", page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=90)
    assert screenshot.is_file() and screenshot.stat().st_size > 0, shot.stderr[-2000:]
    assert not [line for line in shot.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image

    pixels = matplotlib.image.imread(screenshot)
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 50, "screenshot is blank (a single colour or nearly)"


def test_a_sweeps_cells_share_one_version_plot_and_one_day_keeps_its_week(tmp_path):
    """Rows a sweep measured at three tqdm versions are three cells by date but one series by tqdm version: the
    version plot is drawn once, the other sections point to it."""
    import pandas as pd

    rng = np.random.default_rng(9)
    rows = [record("native-torch", "bert-fit", repeat=r, step_ms=samples(rng, 10.0, n=5), sweep_point=f"tqdm=={v}",
                   sweep_installed=f"tqdm=={v}", started_at=dt.datetime(2026, 11, 28, 12, i, r, tzinfo=dt.timezone.utc))
            for i, v in enumerate(("4.66.1", "4.66.2", "4.66.3")) for r in range(3)]
    page = history_page.write_page(pd.DataFrame(rows), tmp_path / "page", by_values=["version:tqdm"])
    text = page.read_text()
    assert text.count("<img") == 4  # three date plots, one version plot
    assert text.count("The same series as in the section of") == 2
