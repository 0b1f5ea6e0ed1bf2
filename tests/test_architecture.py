"""The layer rule of docs/architecture.md, read from the code itself: every import of an fwbench or
fwbench_aggregator module (at module level or inside a function) goes to the importer's own layer or one
it may use, and no two modules import each other, directly or around a loop."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"fwbench": ROOT / "runner" / "fwbench", "fwbench_aggregator": ROOT / "aggregator" / "fwbench_aggregator"}

# Layer -> the layers its modules may import (its own included). Bottom to top:
# core < workloads < harness < engines < cluster | release | kit < cli; the aggregator reads core only and is
# read by release (verify's judgement), the GPU kit (its results page) and cli, never by anything that runs a cell.
MAY_IMPORT = {
    "core": {"core"},
    "workloads": {"core", "workloads"},
    "harness": {"core", "workloads", "harness"},
    "engines": {"core", "workloads", "harness", "engines"},
    "aggregator": {"core", "aggregator"},
    "cluster": {"core", "workloads", "harness", "engines", "cluster"},
    "release": {"core", "harness", "engines", "aggregator", "release"},
    "kit": {"core", "workloads", "harness", "engines", "aggregator", "kit"},
    "cli": {"core", "workloads", "harness", "engines", "aggregator", "cluster", "release", "kit", "cli"},
}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "fwbench_aggregator":
        return "aggregator"
    if len(parts) == 1:
        return "core"  # the package itself holds only __version__
    return parts[1]


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            parts = (package, *path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The fwbench modules a file imports (`from X import Y` counts X.Y when Y is a module, else X)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in known:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in known else node.module)
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: relative import (write it absolute, so the layer test reads it)")
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(path, set(known)) - {name} for name, path in known.items()}


def test_every_module_is_in_a_known_layer(graph):
    unknown = sorted(m for m in graph if layer_of(m) not in MAY_IMPORT)
    assert not unknown, f"modules outside the layers of docs/architecture.md: {unknown}"


def test_no_import_goes_up_or_sideways(graph):
    wrong = sorted(f"{importer} ({layer_of(importer)}) imports {imported} ({layer_of(imported)})"
                   for importer, imported_set in graph.items() for imported in imported_set
                   if layer_of(imported) not in MAY_IMPORT[layer_of(importer)])
    assert not wrong, "imports against the layer rule:\n" + "\n".join(wrong)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the groups of modules that reach each other."""
    index, low, stack, on_stack, groups, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_no_import_cycles(graph):
    cycles = [group for group in strongly_connected(graph) if len(group) > 1]
    assert not cycles, f"modules that import each other: {cycles}"


def test_the_checks_catch_what_they_are_for():
    """The checks themselves: an upward import and a loop are found."""
    upward = {"fwbench.core.registry": {"fwbench.cli.commands"}, "fwbench.cli.commands": set()}
    assert any(layer_of(t) not in MAY_IMPORT[layer_of(s)] for s, ts in upward.items() for t in ts)
    loop = {"fwbench.core.a": {"fwbench.core.b"}, "fwbench.core.b": {"fwbench.core.c"}, "fwbench.core.c": {"fwbench.core.a"}}
    assert [len(g) for g in strongly_connected(loop)] == [3]


# --- one judge (issue 49) -----------------------------------------------------------------------------------------
# Only fwbench_aggregator.judge decides a winner, tie, change, regression or "reproduced": no other module compares a
# median, a ratio, an interval bound or a p-value (stats computes them; judge compares them). A comparison that is
# not a verdict is listed here with its reason.
JUDGE_MODULES = {"fwbench_aggregator.judge", "fwbench_aggregator.stats"}
VERDICT_NUMBERS = {"median", "low", "high", "ratio", "ratio_low", "ratio_high", "p_value", "p_adjusted", "p_adj",
                   "p_change", "p_equivalent", "p_slower", "p_faster", "p", "log_ratio", "se"}
NOT_VERDICTS = {
    ("fwbench.core.cpusets", "low < 0"): "a CPU list's range",
    ("fwbench.core.cpusets", "high < low"): "a CPU list's range",
    ("fwbench.core.sweep", "low <= Version(v) <= high"): "the releases between two versions",
    ("fwbench.release.verify", "values < low"): "a published setting's sane bounds",
    ("fwbench.release.verify", "values > high"): "a published setting's sane bounds",
    ("fwbench_aggregator.plots", "e.median > 0"): "a log-scale axis needs positive values",
}


def verdict_comparisons(source: str) -> list[str]:
    """Comparisons (<, <=, >, >=, ==, !=) that have a verdict number as an operand (a name or attribute of
    VERDICT_NUMBERS, bare or inside arithmetic or abs())."""
    def operand_numbers(node) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr in VERDICT_NUMBERS
        if isinstance(node, ast.Name):
            return node.id in VERDICT_NUMBERS
        if isinstance(node, ast.BinOp):
            return operand_numbers(node.left) or operand_numbers(node.right)
        if isinstance(node, ast.UnaryOp):
            return operand_numbers(node.operand)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("abs", "float"):
            return any(operand_numbers(arg) for arg in node.args)
        if isinstance(node, ast.Subscript):
            return operand_numbers(node.value)
        return False

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq))
                                                 for op in node.ops):
            if any(operand_numbers(operand) for operand in (node.left, *node.comparators)):
                found.append(ast.unparse(node))
    return found


def test_only_the_judge_compares_medians_ratios_intervals_and_p_values():
    found = sorted(f"{name}: {text}" for name, path in modules().items() if name not in JUDGE_MODULES
                   for text in verdict_comparisons(path.read_text()) if (name, text) not in NOT_VERDICTS)
    assert not found, ("verdicts decided outside fwbench_aggregator.judge (call the judge; or, if it is no verdict, "
                       "list it in NOT_VERDICTS with its reason):\n" + "\n".join(found))


def test_the_verdict_check_catches_what_it_is_for():
    assert verdict_comparisons("best = a if a.median < b.median else b") == ["a.median < b.median"]
    assert verdict_comparisons("if abs(r.ratio - 1) * 100 >= tolerance: pass")
    assert verdict_comparisons("if r.ratio_low > 1: pass") and verdict_comparisons("ok = p_adj < alpha")
    assert not verdict_comparisons("if ranking.word != FASTER: pass")
