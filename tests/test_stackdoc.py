"""docs/stacks.md's cell table is generated from the registry and the workload sources, and kept in sync."""

from __future__ import annotations

import subprocess
import sys

from fwbench.core import registry
from fwbench.cli import stackdoc


def test_docs_stacks_md_has_the_current_table():
    document = stackdoc.DOC.read_text()
    assert stackdoc.render(document) == document, (
        "docs/stacks.md is stale: run `python -m fwbench.cli.stackdoc --write`")


def test_every_cell_has_a_row_with_files_that_exist_and_its_timed_call():
    entries = stackdoc.entries()
    assert len(entries) == len(registry.STACKS) * len(registry.TASKS)
    for item in entries:
        assert all((stackdoc.REPO_ROOT / path).is_file() for path in item.files), item.files
        if item.cell is None:
            assert item.stack.unsupported_reason(item.task.model)
            continue
        assert item.files[0] == f"runner/fwbench/workloads/{item.stack.family}/{item.task.model}.py"
        assert item.task.kind in item.cell.kinds and item.cell.timed
        assert f"runner/fwbench/{item.cell.module.split('.', 1)[1].replace('.', '/')}.py" in item.files


def test_table_names_the_known_timed_calls():
    table = stackdoc.markdown_table()
    assert "trainer.train(): one Trainer optimizer step per clock step" in table
    assert "`jit_compile=False`" in table and "`jit_compile=True`" in table  # keras3-torch eager, others XLA
    # One row per stack x task, in the report's stack order.
    rows = [line for line in table.splitlines()[2:]]
    assert [row.split("|")[1].strip(" `") for row in rows[::len(registry.TASKS)]] == list(registry.REPORT_ORDER)


def test_generator_runs_as_a_module():
    # The dev environment has no deep-learning framework: the generator only parses the workload sources.
    done = subprocess.run([sys.executable, "-m", "fwbench.cli.stackdoc"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{stackdoc.markdown_table()}\n\n{stackdoc.pin_table()}"


def test_pin_table_shows_every_published_pin_beside_both_pin_sets():
    table = stackdoc.pin_table()
    assert "| keras3-jax | jax | 0.4.20 | 0.4.23 |" in table  # a declared deviation, with its reason
    assert "| native-torch | transformers | 4.38.2 | 4.38.2 |" in table
    rows = table.splitlines()[2:]
    assert len(rows) == sum(len(stack.published_pins) for stack in registry.STACKS.values())
