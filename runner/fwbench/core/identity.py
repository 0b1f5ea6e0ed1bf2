"""A cell's identity: the readable key plus every setting that changes what is measured.

Two rows are repeats of one measurement (pooled into one estimate, skipped by `--resume`, paired by
`compare`) only when their identities are equal. The same table serves the runner (from a CellSpec),
the writer (file names) and the aggregator (from a row), so the three can never disagree. Comparisons have one
rule here too (held_equal): cells are set side by side along an axis only when equal in every other field.

Plain Python: the cell process and the aggregator both import it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from fwbench.core import precision

# setting -> (row column, CellSpec attribute). The key fields (stack, task, preset, compile mode) are
# the readable part; these are the settings beside them.
SETTINGS: dict[str, tuple[str, str]] = {
    "pin_set": ("pin_set", "pin_set"),
    "jit": ("jit_policy", "jit"),
    "image_variant": ("image_variant", "image_variant"),
    "precision": ("precision", "precision"),
    "threads": ("threads", "threads"),
    "warmup": ("warmup_steps", "warmup"),
    "steps": ("timed_steps", "steps"),
    "per_step_sync": ("per_step_sync", "per_step_sync"),
    "data_seed": ("data_seed", "seed"),
    "device_model": ("device_model", "device_model"),
    # A version-sweep point (fwbench.core.sweep): "transformers==4.38.2" or "date:2024-03-01"; None: no sweep.
    "sweep_point": ("sweep_point", "sweep_point"),
    # Data-parallel scaling (fwbench.core.scaling): the devices a fit ran data-parallel on, and the global batch
    # asked for (--global-batch: strong scaling; None: weak scaling, the task's batch per device).
    "devices": ("devices", "devices"),
    "global_batch": ("global_batch_setting", "global_batch"),
    # A user's model file (fwbench run --model, fwbench.core.model_file): its SHA-256, so an edited file is a new
    # cell; None: a registry task.
    "model_sha256": ("model_sha256", "model_sha256"),
    # Keras steps_per_execution (fwbench run --model --steps-per-execution): steps per call of the compiled step.
    "steps_per_execution": ("steps_per_execution", "steps_per_execution"),
}
KEY_FIELDS = ("stack", "task", "preset", "compile_mode")

# The rule for a new identity setting (docs/results-schema.md, "Cell identity"): it gets a default, and an entry
# here saying what a row without its column (written before the setting existed) is read as, the value that row
# was in fact measured at; so old results, `--resume` and published bundles still pair with new rows. Adding the
# column bumps SCHEMA_VERSION (fwbench.core.schema). A setting can be read from an older column of the row.
OLD_ROWS_READ_AS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "device_model": lambda row: row.get("device_name"),  # schema v1 recorded only device_name
    # Before schema v7 the TF32 setting was the axis: default, on, off are published, tf32, fp32.
    "precision": precision.of_row,
    "sweep_point": lambda row: None,  # before schema v8 no row was a sweep point
    "devices": lambda row: 1,  # before schema v9 every cell ran on one device
    "global_batch": lambda row: None,  # ... with the task's batch (weak scaling's)
    "model_sha256": lambda row: None,  # before schema v12 every row was a registry task
    "steps_per_execution": lambda row: 1,  # before schema v13 every step was one call
}
# Settings read through their OLD_ROWS_READ_AS entry even when the row has the column (a `published` row beside a
# --tf32 on/off is the same one-axis precision).
ALWAYS_READ_AS = ("precision",)

# Settings whose default does not depend on the host or the preset: shown in labels and file names
# only when they differ from it.
FIXED_DEFAULTS: dict[str, Any] = {"pin_set": "current", "jit": "published", "precision": "published",
                                  "per_step_sync": True, "data_seed": 0, "sweep_point": None,
                                  "devices": 1, "global_batch": None, "model_sha256": None,
                                  "steps_per_execution": 1}
# Axes with a report section of their own (the version sweep; data-parallel scaling): the headline (the report's
# main tables, Keras 3 best, speed-ups, rankings, the published comparison) holds each at its FIXED_DEFAULTS value
# (no sweep point, one device, the task's batch); their other values are compared in their own section.
SECTION_AXES: dict[str, tuple[str, ...]] = {"sweep": ("sweep_point",), "scaling": ("devices", "global_batch")}
# How a non-default setting reads in a file name (also a strict, path-safe token).
_TOKEN = {
    "pin_set": "pins-{}", "jit": "jit-{}", "precision": "prec-{}", "threads": "threads-{}", "warmup": "warmup-{}",
    "steps": "steps-{}", "data_seed": "seed-{}", "sweep_point": "at-{}",
    "devices": "devices-{}", "global_batch": "gbatch-{}", "model_sha256": "file-{:.12}",
    "steps_per_execution": "spe-{}",
}
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")


@dataclass(frozen=True, order=True)
class CellIdentity:
    stack: str
    task: str
    preset: str
    compile_mode: str
    settings: tuple[tuple[str, Any], ...]  # (name, value) in SETTINGS order

    @property
    def cell_key(self) -> str:
        """The readable part: stack.task.preset.compile-<mode> (the `cell_id` column)."""
        return f"{self.stack}.{self.task}.{self.preset}.compile-{self.compile_mode}"

    def setting(self, name: str) -> Any:
        return dict(self.settings)[name]

    @property
    def settings_id(self) -> str:
        """Short hash of every setting: equal ids, equal measurement conditions."""
        return settings_hash(dict(self.settings))

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> "CellIdentity":
        values = {name: _plain(row.get(column)) for name, (column, _) in SETTINGS.items()}
        for name, old_value in OLD_ROWS_READ_AS.items():
            if values[name] is None or name in ALWAYS_READ_AS:
                values[name] = _plain(old_value(row))
        return cls(*(str(row.get(f)) for f in KEY_FIELDS), tuple(values.items()))

    @classmethod
    def of_spec(cls, spec) -> "CellIdentity":
        values = {name: _plain(getattr(spec, attribute)) for name, (_, attribute) in SETTINGS.items()}
        return cls(*(getattr(spec, f) for f in KEY_FIELDS), tuple(values.items()))


def held_equal(identity: CellIdentity, along) -> CellIdentity:
    """The rule of every comparison: one along the fields `along` (settings, or key fields such as stack and
    compile_mode) pairs or ranks only cells whose identities are equal in every other field, that is whose
    held_equal(identity, along) are equal. The returned identity has the `along` fields blanked (None)."""
    along = set(along)
    unknown = along - set(SETTINGS) - set(KEY_FIELDS)
    if unknown:
        raise ValueError(f"not an identity field: {', '.join(sorted(unknown))}")
    keys = (None if name in along else getattr(identity, name) for name in KEY_FIELDS)
    return CellIdentity(*keys, tuple((name, None if name in along else value) for name, value in identity.settings))


def off_headline(identity: CellIdentity, section: str | None = None) -> tuple[str, ...]:
    """The settings of a section axis (SECTION_AXES; default: every one) at which the cell is off the headline."""
    names = SECTION_AXES[section] if section else [name for axis in SECTION_AXES.values() for name in axis]
    return tuple(name for name in names if identity.setting(name) != FIXED_DEFAULTS[name])


def settings_hash(settings: Mapping[str, Any]) -> str:
    canonical = json.dumps({k: _plain(settings.get(k)) for k in SETTINGS}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]


def _plain(value: Any) -> Any:
    """numpy/pandas scalars and NaN -> plain Python, so rows read back compare equal to specs."""
    if value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and value != value:  # NaN (a missing value read through pandas)
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def file_tokens(identity: CellIdentity, defaults: Mapping[str, Any]) -> list[str]:
    """Readable file-name tokens for the settings that differ from their defaults.

    `defaults` adds the host- and preset-dependent defaults (threads, warmup, steps). Settings
    without a token (device, image variant) are told apart by the settings hash when needed."""
    tokens = []
    all_defaults = {**FIXED_DEFAULTS, **defaults}
    for name, value in identity.settings:
        if name == "per_step_sync":
            if value is False:
                tokens.append("nosync")
        elif name in _TOKEN and name in all_defaults and value != all_defaults[name]:
            tokens.append(_TOKEN[name].format(_slug(value)))
    return tokens


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", str(value))[:32]


def differing_settings(identity: CellIdentity, varying: set[str]) -> tuple[tuple[str, Any], ...]:
    """The settings worth naming in a label: those off their default, and those without a default that
    vary in the data (threads, device...): "native-torch [none]" beside "native-torch [none, precision=tf32]"."""
    shown = []
    for name, value in identity.settings:
        if (value != FIXED_DEFAULTS[name]) if name in FIXED_DEFAULTS else (name in varying):
            shown.append((name, value))
    return tuple(shown)


def describe(settings: tuple[tuple[str, Any], ...]) -> str:
    """'tf32=on, threads=1' (booleans as on/off)."""
    def text(value: Any) -> str:
        if isinstance(value, bool):
            return "on" if value else "off"
        return "?" if value is None else str(value)
    return ", ".join(f"{name}={text(value)}" for name, value in settings)
