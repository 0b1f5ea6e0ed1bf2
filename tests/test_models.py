"""One definition per model (fwbench.core.models): typed architectures, shapes, batch sizes, and workloads that
read only attributes those definitions have (checked on the sources: no framework needed)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from fwbench.core import models, registry

WORKLOADS = Path(__file__).resolve().parents[1] / "runner" / "fwbench" / "workloads"
FAMILIES = ("keras", "torch")


def workload_sources() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), filename=str(path))
            for family in FAMILIES for path in sorted((WORKLOADS / family).glob("*.py"))}


def _read_on(node: ast.AST, name: str) -> bool:
    """`node` is `name` or `<anything>.name` (arch, ctx.arch, self.arch)."""
    return (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)


def model_classes(path: Path, sources: dict[Path, ast.Module]) -> list[models.Model]:
    """The models whose definition a workload file reads: its own model, or for a shared module the models
    whose module imports it."""
    if path.stem in models.MODELS:
        return [models.MODELS[path.stem]]
    dotted = f"fwbench.workloads.{path.parent.name}.{path.stem}"
    users = []
    for other, tree in sources.items():
        if other.stem in models.MODELS and other.parent == path.parent and any(
                isinstance(node, ast.ImportFrom) and node.module == dotted for node in tree.body):
            users.append(models.MODELS[other.stem])
    return users


def test_every_workload_attribute_exists_on_its_model_definition():
    sources = workload_sources()
    problems, checked = [], 0
    for path, tree in sources.items():
        users = model_classes(path, sources)
        for node in ast.walk(tree):
            for holder, cls_of in (("arch", lambda m: m.arch_class), ("shapes", lambda m: m.shapes_class)):
                if isinstance(node, ast.Attribute) and _read_on(node.value, holder):
                    if not users:
                        problems.append(f"{path.name}:{node.lineno}: reads {holder}.{node.attr} but no model uses it")
                    for model in users:
                        checked += 1
                        if node.attr not in models.field_names(cls_of(model)):
                            problems.append(f"{path.name}:{node.lineno}: {cls_of(model).__name__} has no "
                                            f"attribute {node.attr!r} ({model.id})")
                if isinstance(node, ast.Subscript) and _read_on(node.value, holder):
                    problems.append(f"{path.name}:{node.lineno}: {holder}[...]: use attributes, not keys")
    assert not problems, "\n".join(problems)
    assert checked > 50  # the check really saw the workloads' reads


def test_the_attribute_check_catches_a_typo(tmp_path):
    tree = ast.parse("def build(ctx):\n    return ctx.arch.hiden\n")
    reads = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and _read_on(n.value, "arch")]
    assert reads == ["hiden"] and "hiden" not in models.field_names(models.BertArch)
    assert "hidden" in models.field_names(models.BertArch)


def test_a_misspelt_size_in_a_definition_fails_at_construction():
    with pytest.raises(TypeError):
        models.BertArch(vocab_size=1, hiden=2, layers=1, heads=1, intermediate=1, max_positions=1, num_classes=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        models.BERT.arch("tiny").hidden = 3


def test_every_model_is_defined_at_every_preset_with_its_own_types():
    for model in models.MODELS.values():
        for preset in registry.PRESETS:
            assert isinstance(model.arch(preset), model.arch_class)
            assert isinstance(model.shapes[preset], model.shapes_class)
    with pytest.raises(ValueError, match="presets"):
        models.Model("x", models.BertArch, models.TextShapes, {"tiny": models.BERT.arch("tiny")},
                     models.BERT.shapes, models.bert_inputs)


def test_every_task_has_a_model_and_a_batch_size_per_preset():
    for task in registry.TASKS.values():
        assert task.model in models.MODELS and task.kind in models.TASK_KINDS
        for preset in registry.PRESETS:
            workload = registry.workload(task.id, preset)
            assert workload.batch_size == task.batch[preset] > 0
            assert workload.arch is models.MODELS[task.model].arch(preset)
        assert task.published_batch == task.batch["paper"]
    with pytest.raises(ValueError, match="unknown model"):
        registry.Task("x-fit", "xmodel", "fit", {"paper": 1, "small": 1, "tiny": 1})


def test_paper_preset_matches_the_published_sizes():
    # The published table's batch sizes and the public configs (docs/workloads.md).
    assert {t.id: t.published_batch for t in registry.TASKS.values()} == {
        "sam-fit": 1, "sam-predict": 4, "stable_diffusion-fit": 8, "stable_diffusion-predict": 13,
        "bert-fit": 32, "bert-predict": 256, "gemma-fit": 8, "gemma-generate-bs32": 32, "gemma-generate-bs1": 1,
        "mistral-fit": 8, "mistral-generate-bs32": 32, "mistral-generate-bs1": 1}
    assert models.BERT.arch("paper").hidden == 768 and models.GEMMA.arch("paper").intermediate == 24576
    assert models.MISTRAL.arch("paper").sliding_window == 4096 and models.SAM.arch("paper").grid == 64
    # The published max_length=50 counts the start token and the 5-token prompt: 44 new tokens.
    assert 1 + models.GEMMA.shapes["paper"].prompt_len + models.GEMMA.shapes["paper"].new_tokens == 50


def test_workload_modules_declare_a_cell_for_every_kind_of_their_tasks():
    from fwbench.cli import stackdoc

    for family in FAMILIES:
        for model_id in models.MODELS:
            module = f"fwbench.workloads.{family}.{model_id}"
            kinds = {t.kind for t in registry.TASKS.values() if t.model == model_id}
            cells = stackdoc.declared_cells(module)
            assert set(cells) == kinds, module
            for kind, name in cells.items():
                assert kind in stackdoc.cell_class(module, name).kinds, (module, kind, name)


def test_cell_classes_are_defined_at_module_level():
    nested = []
    for path, tree in workload_sources().items():
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                nested += [f"{path.name}:{n.lineno} {n.name}" for n in ast.walk(function) if isinstance(n, ast.ClassDef)]
    assert not nested, nested


def test_keras_sd_v1_references_are_architecture_fields_and_match_the_paper_preset():
    # keras/stable_diffusion.py compares the preset with KerasCV's hard-coded SD v1 widths by attribute name:
    # at `paper` and `small` it must take KerasCV's own classes.
    tree = ast.parse((WORKLOADS / "keras" / "stable_diffusion.py").read_text())
    references = {node.targets[0].id: {kw.arg: ast.literal_eval(kw.value) for kw in node.value.keywords}
                  for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                  and getattr(node.targets[0], "id", "").startswith("SD_V1_")}
    assert set(references) == {"SD_V1_UNET", "SD_V1_VAE"}
    for preset in ("paper", "small"):
        arch = models.STABLE_DIFFUSION.arch(preset)
        for reference in references.values():
            assert all(getattr(arch, key) == value for key, value in reference.items()), (preset, reference)
    tiny = models.STABLE_DIFFUSION.arch("tiny")
    assert any(getattr(tiny, key) != value for key, value in references["SD_V1_UNET"].items())
