"""Variants (stack + compile mode + settings): labels, column order like the published table, families.

A "variant" is what the published table calls a column: e.g. native PyTorch eager and compiled are
two columns of one stack. Rows of different cell identities are never pooled: a variant also carries
the identity settings worth naming (those off their default, and those that vary in the data), so
`--tf32 on` rows become their own column, "native-torch [none, tf32=on]".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from fwbench.core import axes, registry
from fwbench.core.identity import CellIdentity, describe, differing_settings, varying_settings
from fwbench_aggregator import judge

# Published column order (the stack definitions' report order), then native PyTorch eager and compiled.
_STACK_ORDER = registry.REPORT_ORDER
_NATIVE_COMPILE_ORDER = ("none", "reduce-overhead", "default", "max-autotune")

NATIVE_EAGER = ("native-torch", "none")
NATIVE_COMPILED = ("native-torch", "reduce-overhead")
KERAS2 = ("keras2-tensorflow", "xla")


# Shorter names for settings in labels, and values a label shortens (a model file's SHA-256: its first 12 hex
# digits, as in its file names): the axes' own (fwbench.core.axes).
def _label_text(name: str, value: Any) -> tuple[str, Any]:
    axis = axes.by_name().get(name)
    if axis is None:
        return name, value
    return axis.label_name, (str(value)[:axis.shorten] if axis.shorten and value else value)


@dataclass(frozen=True, order=True)
class Variant:
    stack: str
    compile_mode: str
    settings: tuple[tuple[str, Any], ...] = ()  # the named identity settings (see module doc)
    # Set only where one cell identity's rows ran in several environments (library versions, compile-cache state:
    # fwbench_aggregator.judge.environment_parts): what differs, so each part is a column of its own, never pooled.
    environment: str = ""

    @property
    def settings_text(self) -> str:
        """The named settings as the label shows them: 'pins=paper-2024, threads=4' ('' when none)."""
        return describe(tuple(_label_text(k, v) for k, v in self.settings))

    @property
    def label(self) -> str:
        label = f"{self.stack} [{', '.join(filter(None, [self.compile_mode, self.settings_text]))}]"
        return f"{label} ({self.environment})" if self.environment else label

    @property
    def key(self) -> tuple[str, str]:
        return (self.stack, self.compile_mode)

    @property
    def published(self) -> "Variant":
        """The published table's column this variant is set against (the published run had no settings)."""
        return Variant(self.stack, self.compile_mode)

    @property
    def is_keras3(self) -> bool:
        stack = registry.STACKS.get(self.stack)
        return stack is not None and stack.keras_version == 3

    def sort_key(self) -> tuple:
        stack_rank = _STACK_ORDER.index(self.stack) if self.stack in _STACK_ORDER else len(_STACK_ORDER)
        mode_rank = (_NATIVE_COMPILE_ORDER.index(self.compile_mode)
                     if self.compile_mode in _NATIVE_COMPILE_ORDER else len(_NATIVE_COMPILE_ORDER))
        return (stack_rank, self.stack, mode_rank, self.compile_mode, tuple(map(str, self.settings)),
                self.environment)


def identities(frame: pd.DataFrame) -> list[CellIdentity]:
    return [CellIdentity.of_row(row) for row in frame.to_dict("records")]


def assign_variants(frame: pd.DataFrame, unnamed: tuple[str, ...] = ()) -> pd.DataFrame:
    """Adds `_identity` (full cell identity) and `_variant` (its column in the tables) to every row.

    Settings are named when off their fixed default (--jit, TF32, per-step sync, data seed, pin set) or when they
    take more than one value within a preset (any setting: threads, steps, device...); `unnamed` settings never are
    (the report's tables are one precision each: its title names it)."""
    ids = identities(frame)
    frame = frame.assign(_identity=ids)
    variants = []
    varying = {str(preset): varying_settings(rows["_identity"]) for preset, rows in frame.groupby("preset")}
    environments = _environment_labels(frame, ids)
    for index, identity in enumerate(ids):
        shown = tuple((name, value) for name, value in differing_settings(identity, varying.get(identity.preset, set()))
                      if name not in unnamed)
        variants.append(Variant(identity.stack, identity.compile_mode, shown, environments.get(index, "")))
    return frame.assign(_variant=variants)


def _environment_labels(frame: pd.DataFrame, ids: list[CellIdentity]) -> dict[int, str]:
    """Row position -> its environment part's label, for the identities whose ok rows ran in more than one
    environment (judge.environment_part_of). A row that did not run ok joins the part of its own environment, or
    stays unlabelled when no ok row shares it."""
    records = frame[[column for column in ("status", *judge.ENVIRONMENT_COLUMNS) if column in frame]].to_dict("records")
    by_identity: dict[CellIdentity, list[int]] = {}
    for index, identity in enumerate(ids):
        by_identity.setdefault(identity, []).append(index)
    labels: dict[int, str] = {}
    for positions in by_identity.values():
        part_labels, part_of = judge.environment_part_of([records[i] for i in positions])
        if len(part_labels) > 1:
            labels.update({i: part_labels[part] for i, part in zip(positions, part_of) if part is not None})
    return labels


def ordered(variants) -> list[Variant]:
    return sorted(set(variants), key=Variant.sort_key)


def task_order(task_ids) -> list[str]:
    """Registry order (the published row order); unknown task ids last, alphabetically."""
    known = [t for t in registry.TASKS if t in set(task_ids)]
    return known + sorted(set(task_ids) - set(known))

