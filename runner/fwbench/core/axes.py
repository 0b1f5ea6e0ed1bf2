"""The axes of a cell: every setting that changes what a cell measures, each declared once, here.

An axis says its name (identity, --across, labels), its row column and CellSpec field, its default, its file-name
token, how a row written before its column existed reads it (`read_old`), its short name in labels, the bounds a
verifier re-runs it within, whether the engine fills it in at run time, how a comparison along it works, and the
report section that holds its other values. The cell identity (fwbench.core.identity), file names, `--resume`,
labels (fwbench_aggregator.variants), compare's --across and its comparability (fwbench_aggregator.compare), verify's
keys and bounds (fwbench.release.verify) and the report's sections are all derived from AXES, and so are the command
line and the cell spec of an axis that declares its `option` (AxisOption): the matrix options (fwbench.cli.options)
add `--<axis-name>` for it, and the cell spec carries its value in `CellSpec.axis_settings` (in the spec's JSON, so
the cell process has it) where CellSpec has no field of its own for it. Adding an axis is one entry below, nothing in
the consumers. What the table does not reach: a row holds the axis only once the schema has its column
(fwbench.core.schema; a new column bumps the schema version) and the cell writes it (fwbench.harness.cell writes each
axis column by name), and the code that acts on the value reads it from the spec (`spec.identity.setting(name)`).
The axes below are older than AxisOption: each has a CellSpec field and a MatrixOptions field of its own (with its
help, checks and overrides), so none declares an option here.

Rows of older schemas are upgraded to the current axes in one place, `current_values` (each axis's `read_old`); no
consumer reads an old row's quirks itself.

Plain Python: the cell process and the aggregator both import it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from fwbench.core import precision

# A default that depends on the host or the preset (threads, warm-up, steps, device, image variant): labels and file
# names name such an axis only when it varies in the data.
HOST = "<host or preset>"

# How a comparison along an axis works (fwbench_aggregator.judge and compare):
RATIO = "ratio"  # B/A of ms/step, judged as a change (pin set, precision, threads...)
PER_SAMPLE = "per sample"  # B/A of ms per sample: the batch differs, so ms/step is meant to change
SCALING = "scaling"  # speed-up and efficiency: more devices are meant to change ms/step, never a regression
RATIO_ONLY = "ratio only"  # another machine: a ratio with its interval, never slower/faster, never gated


@dataclass(frozen=True)
class AxisOption:
    """The command-line option of an axis (`--<axis name>`, shown by every command that takes the matrix options,
    fwbench.cli.options), for an axis that MatrixOptions and CellSpec have no field for: its value travels in
    MatrixOptions.axis_values and CellSpec.axis_settings. Not given: the axis's default (None for a HOST default)."""

    help: str
    # The command line's text -> the value; raises ValueError (or UsageError) on a bad one, which the command reports
    # in one line naming the option.
    parse: Callable[[str], Any] = str
    metavar: str | None = None


@dataclass(frozen=True)
class Axis:
    name: str
    column: str
    spec_field: str  # its CellSpec field; where CellSpec has none (an axis with an `option`): CellSpec.axis_settings
    default: Any = HOST
    token: str | None = None  # file-name token of a value off the default ("prec-{}"); None: the settings hash tells
    read_old: Callable[[Mapping[str, Any]], Any] | None = None  # the value of a row without the column
    always_read_old: bool = False  # read through read_old even where the row has the column
    old_columns: tuple[str, ...] = ()  # the other columns read_old looks at (a loader reads just these)
    old_text: str | None = None  # read_old in words, for the docs (else the value it gives a row without columns)
    label: str | None = None  # short name in labels ("pins"); None: the name
    shorten: int | None = None  # labels show the value's first N characters
    bounds: tuple[int, int] | None = None  # verify re-runs a published value only within these (inclusive)
    bounds_required: bool = False  # ... and refuses rows that lack it (the axis is as old as schema v2)
    engine_filled: bool = False  # the engine fills it in at run time (its device, its image): verify does not copy it
    not_rerunnable: str | None = None  # why verify cannot re-run a value off the default
    compared: str = RATIO
    section: str | None = None  # the report section of its values off the default (the headline holds the default)
    option: AxisOption | None = None  # its command-line option where MatrixOptions has no field for it

    @property
    def unset_value(self) -> Any:
        """The value a spec or an option holds when nothing sets the axis: its default, None where the host or the
        preset decides it."""
        return None if self.default is HOST else self.default

    @property
    def label_name(self) -> str:
        return self.label or self.name


AXES: list[Axis] = [
    Axis("pin_set", "pin_set", "pin_set", "current", "pins-{}", label="pins"),
    Axis("jit", "jit_policy", "jit", "published", "jit-{}"),
    Axis("image_variant", "image_variant", "image_variant", label="image", engine_filled=True),
    # Before schema v7 the TF32 setting was the axis: default, on, off are published, tf32, fp32; a `published` row
    # beside --tf32 on/off is the same one-axis precision, so it is always read through its TF32 setting.
    Axis("precision", "precision", "precision", "published", "prec-{}", read_old=precision.of_row,
         always_read_old=True, old_columns=("tf32_setting",),
         old_text="its TF32 setting: default, on, off are published, tf32, fp32 (always)"),
    Axis("threads", "threads", "threads", token="threads-{}", bounds=(1, 1024), bounds_required=True),
    Axis("warmup", "warmup_steps", "warmup", token="warmup-{}", bounds=(0, 10_000), bounds_required=True),
    Axis("steps", "timed_steps", "steps", token="steps-{}", bounds=(1, 100_000), bounds_required=True),
    Axis("per_step_sync", "per_step_sync", "per_step_sync", True, "nosync", label="sync"),
    Axis("data_seed", "data_seed", "seed", 0, "seed-{}", label="seed", bounds=(0, 2**31 - 1), bounds_required=True),
    # Schema v1 recorded only device_name. A CPU's model names its generation (envinfo.cpu_model).
    Axis("device_model", "device_model", "device_model", read_old=lambda row: row.get("device_name"), label="device",
         engine_filled=True, compared=RATIO_ONLY, old_columns=("device_name",), old_text="its `device_name`"),
    # A version-sweep point (fwbench.core.sweep): "transformers==4.38.2" or "date:2024-03-01"; None: no sweep (no row
    # before schema v8 was one).
    Axis("sweep_point", "sweep_point", "sweep_point", None, "at-{}", read_old=lambda row: None, section="sweep",
         not_rerunnable="a version-sweep point, measured in an environment built for it: the released images hold "
                        "one version of each package"),
    # Data-parallel scaling (fwbench.core.scaling): the devices a fit ran data-parallel on (before schema v9: one),
    # and the global batch asked for (--global-batch: strong scaling; None: weak scaling, the task's batch a device).
    Axis("devices", "devices", "devices", 1, "devices-{}", read_old=lambda row: 1, bounds=(1, 64), compared=SCALING,
         section="scaling"),
    Axis("global_batch", "global_batch_setting", "global_batch", None, "gbatch-{}", read_old=lambda row: None,
         bounds=(1, 1_000_000), compared=PER_SAMPLE, section="scaling"),
    # A user's model file (fwbench run --model): its SHA-256, so an edited file is a new cell; None: a registry task
    # (every row before schema v12).
    Axis("model_sha256", "model_sha256", "model_sha256", None, "file-{:.12}", read_old=lambda row: None,
         label="file", shorten=12),
    # Keras steps_per_execution (run --model --steps-per-execution): steps per call (before schema v13: one).
    Axis("steps_per_execution", "steps_per_execution", "steps_per_execution", 1, "spe-{}", read_old=lambda row: 1,
         bounds=(1, 100_000)),
]


def by_name() -> dict[str, Axis]:
    return {axis.name: axis for axis in AXES}


def plain(value: Any) -> Any:
    """numpy/pandas scalars and NaN -> plain Python, so rows read back compare equal to specs."""
    if value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):  # a missing value read through pandas
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def columns_read() -> list[str]:
    """Every column `current_values` reads: the axes' own and those their read_old look at."""
    return list(dict.fromkeys([axis.column for axis in AXES] + [c for axis in AXES for c in axis.old_columns]))


def current_values(row: Mapping[str, Any]) -> dict[str, Any]:
    """Each axis column's value as the current schema has it: a column the row lacks (written before the axis
    existed) holds the value it was measured at (the axis's read_old). The one reader of old rows' axes."""
    values = {}
    for axis in AXES:
        value = plain(row.get(axis.column))
        if axis.read_old is not None and (value is None or axis.always_read_old):
            value = plain(axis.read_old(row))
        values[axis.column] = value
    return values


def upgrade(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row of any schema with every axis column as the current schema has it (current_values); idempotent, so a
    row read twice reads the same."""
    return {**row, **current_values(row)}


def _shown(value: Any) -> str:
    if value is HOST:
        return "the host's / preset's"
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value is None else str(value)


def markdown_table() -> str:
    """The axes table of docs/results-schema.md (regenerate with `python -m fwbench.core.axes`)."""
    lines = ["| axis | row column | default | file-name token | older rows read as | compared along it |",
             "|---|---|---|---|---|---|"]
    for axis in AXES:
        token = f"`{axis.token}`" if axis.token else "— (settings hash)"
        old = "—" if axis.read_old is None else axis.old_text or _shown(axis.read_old({}))
        lines.append(f"| `{axis.name}` | `{axis.column}` | {_shown(axis.default)} | {token} | {old} | {axis.compared} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
