"""Stack facts live in one place (fwbench.core.registry.Stack): harness backend, Keras backend and version,
cell environment, XLA policy, image repository, report order. Nothing else re-derives them from the id."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fwbench.core import registry
from fwbench.harness import backends

ROOT = Path(__file__).resolve().parents[1]
SCANNED = [*sorted((ROOT / "runner" / "fwbench").rglob("*.py")),
           *sorted((ROOT / "aggregator" / "fwbench_aggregator").rglob("*.py"))]
# Places allowed to name a stack in a comparison, and why. Stack *facts* are never among them.
JUSTIFIED = {
    # `demo --compiled` is a CLI option that adds the native-torch compiled variant by name.
    "runner/fwbench/cli/commands.py",
    # The provenance check of compiled native-torch variants (the variant itself, not a stack fact).
    "aggregator/fwbench_aggregator/provenance.py",
    # The GPU kit's host image runs three named stacks: what each imports there and costs to start are the kit's
    # facts about that image, keyed by stack id, not facts of the stacks.
    "runner/fwbench/kit/image.py",
    "runner/fwbench/kit/estimates.py",
}


def _stack_literals(node: ast.AST) -> list[str]:
    values = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)
            and (v.value in registry.STACKS or any(s.startswith(v.value) and v.value.endswith("-")
                                                   for s in registry.STACKS))]


def stack_comparisons(path: Path) -> list[str]:
    """Comparisons (==, !=, in, startswith) of anything with stack-name literals, and dicts keyed by them."""
    return stack_comparisons_in(path.read_text(), path)


def stack_comparisons_in(text: str, path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(text)):
        literals = []
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                literals += _stack_literals(side)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith":
            for argument in node.args:
                literals += _stack_literals(argument)
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                literals += _stack_literals(key) if key is not None else []
        found += [f"{path.relative_to(ROOT)}:{node.lineno}: {literal!r}" for literal in literals]
    return found


def test_no_module_outside_the_registry_compares_stack_ids_to_stack_names():
    found = [hit for path in SCANNED if path.name != "registry.py"
             and path.relative_to(ROOT).as_posix() not in JUSTIFIED for hit in stack_comparisons(path)]
    assert not found, "read the fact from fwbench.core.registry.Stack instead:\n" + "\n".join(found)


def test_the_scan_sees_comparisons_and_every_exception_is_still_needed():
    probe = ROOT / "tests" / "test_stack_facts.py"  # any file under ROOT, for relative paths
    text = 'def f(s):\n    return s == "keras3-torch" or s.startswith("keras3-") or {"native-torch": 1}\n'
    tree_hits = stack_comparisons_in(text, probe)
    assert len(tree_hits) == 3
    for justified in JUSTIFIED:
        assert stack_comparisons(ROOT / justified), f"{justified} no longer needs its exception"


def test_every_harness_backend_named_by_a_stack_exists():
    assert set(backends.BACKENDS) == set(registry.HARNESS_BACKENDS)
    assert {s.harness_backend for s in registry.STACKS.values()} <= set(backends.BACKENDS)
    with pytest.raises(NotImplementedError):
        backends.backend_for("no-such-stack")


def test_report_order_is_the_published_column_order():
    assert registry.REPORT_ORDER == ("keras3-tensorflow", "keras3-jax", "keras3-torch", "keras2-tensorflow",
                                     "native-torch")
    from fwbench_aggregator import variants

    assert variants._STACK_ORDER == registry.REPORT_ORDER


@pytest.mark.parametrize("stack_id, backend, keras_backend, keras_version, jit", [
    ("keras3-tensorflow", "tensorflow", "tensorflow", 3, True),
    ("keras3-jax", "jax", "jax", 3, True),
    ("keras3-torch", "torch", "torch", 3, False),  # eager, as published
    ("keras2-tensorflow", "tensorflow", None, 2, {True, False}),  # XLA except where the published run had none
    ("native-torch", "torch", None, None, None),
])
def test_stack_facts(stack_id, backend, keras_backend, keras_version, jit):
    stack = registry.get_stack(stack_id)
    assert (stack.harness_backend, stack.keras_backend, stack.keras_version) == (backend, keras_backend, keras_version)
    assert {stack.jit_compile(task) for task in registry.TASKS} == (jit if isinstance(jit, set) else {jit})
    assert stack.image_repository == f"fwbench/{stack_id}"
    assert stack.environment().get("KERAS_BACKEND") == keras_backend


def test_per_task_xla_override_and_validation():
    stack = registry.Stack("x", "keras", "keras", ("xla",), "", harness_backend="jax", report_rank=9,
                           keras_version=3, keras_backend="jax", xla=True, xla_overrides=(("bert-fit", False),))
    assert stack.jit_compile("bert-fit") is False and stack.jit_compile("bert-predict") is True
    with pytest.raises(ValueError, match="harness backend"):
        registry.Stack("y", "torch", "torch", ("none",), "", harness_backend="mxnet", report_rank=9)
    with pytest.raises(ValueError, match="Keras stack"):
        registry.Stack("z", "keras", "keras", ("xla",), "", harness_backend="jax", report_rank=9)


def test_unsupported_models_are_stack_facts_with_a_reason():
    keras2 = registry.get_stack("keras2-tensorflow")
    assert keras2.unsupported_reason("gemma") and "Keras 3" in keras2.unsupported_reason("gemma")
    assert keras2.unsupported_reason("mistral") and keras2.unsupported_reason("bert") is None
    assert all(not s.unsupported for s in registry.STACKS.values() if s.id != "keras2-tensorflow")


def test_docker_engine_default_image_is_the_stacks_image_repository():
    # engines/docker.py formats its template with the stack id; it must name the definition's repository.
    from fwbench.engines.docker import DEFAULT_IMAGE

    for stack in registry.STACKS.values():
        assert (DEFAULT_IMAGE.format(stack=stack.id, pin_set="paper-2024", variant="cpu")
                == f"{stack.image_repository}:paper-2024-cpu")


def test_keras_xla_as_published_per_task_and_the_matched_views():
    """keras-benchmarks v0.0.5 on Keras 2.15 (compile() defaults to jit_compile=None, no XLA): SAM predict ran
    the never-compiled segmenter, SD fit compiled without jit_compile. Every other Keras 2 cell used XLA."""
    keras2 = registry.get_stack("keras2-tensorflow")
    no_xla = {t for t in registry.TASKS if keras2.jit_compile(t) is False}
    assert no_xla == {"sam-predict", "stable_diffusion-fit"}
    for stack in registry.STACKS.values():
        for task in registry.TASKS:
            on, off = stack.jit_compile(task, "on"), stack.jit_compile(task, "off")
            assert (on, off) == ((None, None) if stack.family == "torch" else (True, False))
    with pytest.raises(registry.RegistryError, match="--jit"):
        keras2.jit_compile("bert-fit", "sometimes")
