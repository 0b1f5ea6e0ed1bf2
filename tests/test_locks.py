"""One version of each package within a pin set, and paper-2024 equal to the published pins except the
declared deviations. Reads every images/<stack>/<pin-set>/requirements-<variant>.lock (no network)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from fwbench.core import pins, registry

IMAGES = Path(__file__).resolve().parents[1] / "images"
VARIANTS = ("cpu", "gpu")


def locked(stack: str, pin_set: str, variant: str) -> dict[str, str]:
    return pins.pinned_versions(IMAGES / stack / pin_set / f"requirements-{variant}.lock")


def is_cuda_package(name: str) -> bool:
    """CUDA runtime wheels and GPU plugins: what a framework's CUDA build brings, nothing else."""
    return name.startswith(("nvidia-", "jax-cuda"))


def disagreements(locks: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Packages more than one stack locks, at different versions. Exempt: CUDA runtime wheels (each
    framework's own CUDA build pins its own) and Keras 2's `keras` (Keras 2 vs 3 is what the stacks compare)."""
    versions: dict[str, dict[str, str]] = defaultdict(dict)
    for stack, packages in locks.items():
        for name, version in packages.items():
            if is_cuda_package(name):
                continue
            if name == "keras" and registry.get_stack(stack).keras_version == 2 and version.startswith("2."):
                continue
            versions[name][stack] = version
    return {name: by_stack for name, by_stack in versions.items() if len(set(by_stack.values())) > 1}


@pytest.mark.parametrize("pin_set", pins.PIN_SETS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_stack_of_a_pin_set_locks_the_same_version_of_a_shared_package(pin_set, variant):
    locks = {stack: locked(stack, pin_set, variant) for stack in registry.STACKS}
    found = disagreements(locks)
    assert not found, (f"{pin_set}/{variant}: shared packages at different versions {found}; pin one version in "
                       f"images/pin-sets/{pin_set}.txt and run bash images/lock.sh")


@pytest.mark.parametrize("pin_set", pins.PIN_SETS)
@pytest.mark.parametrize("stack", registry.STACKS)
def test_a_gpu_variant_differs_from_its_cpu_variant_only_in_cuda_packages(stack, pin_set):
    cpu, gpu = locked(stack, pin_set, "cpu"), locked(stack, pin_set, "gpu")
    assert not set(cpu) - set(gpu), f"only in the cpu lock: {sorted(set(cpu) - set(gpu))}"
    extra = sorted(name for name in set(gpu) - set(cpu) if not is_cuda_package(name))
    assert not extra, f"the gpu lock adds non-CUDA packages {extra}"
    differ = {name: (cpu[name], gpu[name]) for name in cpu if cpu[name] != gpu[name]}
    assert not differ, f"cpu and gpu locks pin different versions: {differ}"


def test_the_check_finds_a_disagreement_and_spares_what_it_should():
    locks = {"keras3-jax": {"numpy": "1.26.4", "keras": "3.0.5", "nvidia-cudnn-cu12": "8.9.7.29"},
             "keras3-torch": {"numpy": "1.26.4", "keras": "3.0.5", "nvidia-cudnn-cu12": "8.9.2.26"},
             "keras2-tensorflow": {"numpy": "1.26.3", "keras": "2.15.0"}}
    assert disagreements(locks) == {"numpy": {"keras3-jax": "1.26.4", "keras3-torch": "1.26.4",
                                              "keras2-tensorflow": "1.26.3"}}
    locks["keras3-torch"]["keras"] = "3.1.0"
    assert set(disagreements(locks)) == {"numpy", "keras"}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("stack", registry.STACKS)
def test_paper_2024_locks_hold_the_published_pins_except_the_declared_deviations(stack, variant):
    packages = locked(stack, pins.PUBLISHED_PIN_SET, variant)
    python = pins.LOCKED_PYTHON  # what images/lock.sh resolves for (a declared deviation from the published 3.10)
    definition = registry.get_stack(stack)
    assert pins.pin_deviations(definition, pins.PUBLISHED_PIN_SET, packages, python) == [
        deviation.label() for deviation in definition.pin_deviations]


def test_an_environment_that_drifted_from_the_published_pins_says_so():
    jax = registry.get_stack("keras3-jax")
    packages = locked("keras3-jax", pins.PUBLISHED_PIN_SET, "cpu")
    assert not any(label.startswith("undeclared") for label in
                   pins.pin_deviations(jax, "paper-2024", packages, "3.11.9"))
    drifted = {**packages, "keras-nlp": "0.9.0"}
    drifted.pop("keras")
    labels = pins.pin_deviations(jax, "paper-2024", drifted, "3.10.14")
    assert "undeclared: keras missing (published 3.0.5)" in labels
    assert "undeclared: keras-nlp 0.9.0 (published 0.8.2)" in labels
    assert not any(label.startswith("python") for label in labels)  # 3.10 is the published Python
    assert pins.pin_deviations(jax, "current", drifted, "3.11.9") == []


def test_every_deviation_names_a_published_pin_and_says_why():
    for stack in registry.STACKS.values():
        published = dict(stack.published_pins)
        assert published["python"] == pins.PUBLISHED_PYTHON, stack.id
        for deviation in stack.pin_deviations:
            assert deviation.reason and published[deviation.package] == deviation.published, (stack.id, deviation)
