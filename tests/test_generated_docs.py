"""Every generated block in the docs equals what its command prints from the committed result files now
(benchmarks/docblocks.py): a figure in a block cannot drift from its data."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def docblocks():
    spec = importlib.util.spec_from_file_location("docblocks", ROOT / "benchmarks" / "docblocks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_generated_block_in_the_docs_is_what_its_command_prints_now():
    module = docblocks()
    files = module.markdown_files()
    assert sum(len(module.blocks(path)) for path in files) >= 1
    assert module.check(files) == []


def test_a_block_edited_by_hand_or_made_from_other_data_is_stale(tmp_path):
    module = docblocks()
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "figure.py").write_text(
        "import json, sys\nprint(f\"{json.load(open(sys.argv[1]))['ms']:.1f} ms\")\n")
    (tmp_path / "data.json").write_text('{"ms": 12.34}')
    page = tmp_path / "page.md"
    page.write_text("Intro.\n\n<!-- BEGIN generated: python benchmarks/figure.py data.json -->\n12.3 ms\n"
                    "<!-- END generated -->\n")
    assert module.check([page], tmp_path) == []
    page.write_text(page.read_text().replace("12.3 ms", "11.0 ms"))  # edited by hand
    [line] = module.check([page], tmp_path)
    assert "stale block" in line and "figure.py" in line
    assert module.write([page], tmp_path) == 1 and "12.3 ms" in page.read_text() and module.check([page], tmp_path) == []
    (tmp_path / "data.json").write_text('{"ms": 20.0}')  # the data changed, the page did not
    assert len(module.check([page], tmp_path)) == 1


def test_a_block_must_name_a_benchmarks_script_and_close(tmp_path):
    module = docblocks()
    page = tmp_path / "page.md"
    page.write_text("<!-- BEGIN generated: rm -rf / -->\nx\n<!-- END generated -->\n")
    with pytest.raises(module.BadBlock, match="not a renderer command"):
        module.check([page], tmp_path)
    page.write_text("<!-- BEGIN generated: python benchmarks/figure.py -->\nx\n")
    with pytest.raises(module.BadBlock, match="without an END"):
        module.blocks(page)
