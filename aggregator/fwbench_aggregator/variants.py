"""Variants (stack + compile mode): labels, column order like the published table, families.

A "variant" is what the published table calls a column: e.g. native PyTorch eager and compiled are
two columns of one stack.
"""

from __future__ import annotations

from dataclasses import dataclass

from fwbench import registry

# Published column order (the stack definitions' report order), then native PyTorch eager and compiled.
_STACK_ORDER = registry.REPORT_ORDER
_NATIVE_COMPILE_ORDER = ("none", "reduce-overhead", "default", "max-autotune")

NATIVE_EAGER = ("native-torch", "none")
NATIVE_COMPILED = ("native-torch", "reduce-overhead")
KERAS2 = ("keras2-tensorflow", "xla")


@dataclass(frozen=True, order=True)
class Variant:
    stack: str
    compile_mode: str

    @property
    def label(self) -> str:
        return f"{self.stack} [{self.compile_mode}]"

    @property
    def key(self) -> tuple[str, str]:
        return (self.stack, self.compile_mode)

    @property
    def is_keras3(self) -> bool:
        stack = registry.STACKS.get(self.stack)
        return stack is not None and stack.keras_version == 3

    def sort_key(self) -> tuple:
        stack_rank = _STACK_ORDER.index(self.stack) if self.stack in _STACK_ORDER else len(_STACK_ORDER)
        mode_rank = (_NATIVE_COMPILE_ORDER.index(self.compile_mode)
                     if self.compile_mode in _NATIVE_COMPILE_ORDER else len(_NATIVE_COMPILE_ORDER))
        return (stack_rank, self.stack, mode_rank, self.compile_mode)


def ordered(variants) -> list[Variant]:
    return sorted(set(variants), key=Variant.sort_key)


def task_order(task_ids) -> list[str]:
    """Registry order (the published row order); unknown task ids last, alphabetically."""
    known = [t for t in registry.TASKS if t in set(task_ids)]
    return known + sorted(set(task_ids) - set(known))

