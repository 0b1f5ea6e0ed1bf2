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

from fwbench.core import axes
from fwbench.core.axes import plain as _plain

# Everything below is derived from the one table of axes (fwbench.core.axes.AXES); `rebuild` derives it again, in
# place, so that modules which imported these names see an axis declared later (a test's toy axis).
# setting -> (row column, CellSpec attribute). The key fields (stack, task, preset, compile mode) are the readable
# part; these are the settings beside them.
SETTINGS: dict[str, tuple[str, str]] = {}
KEY_FIELDS = ("stack", "task", "preset", "compile_mode")
# What a row without a setting's column (written before the setting existed) is read as: the value that row was in
# fact measured at, so old results, `--resume` and published bundles still pair with new rows (axes.current_values).
OLD_ROWS_READ_AS: dict[str, Callable[[Mapping[str, Any]], Any]] = {}
# Settings read through their OLD_ROWS_READ_AS entry even when the row has the column.
ALWAYS_READ_AS: list[str] = []
# Settings whose default does not depend on the host or the preset: shown in labels and file names only when they
# differ from it.
FIXED_DEFAULTS: dict[str, Any] = {}
# Axes with a report section of their own (the version sweep; data-parallel scaling): the headline (the report's
# main tables, Keras 3 best, speed-ups, rankings, the published comparison) holds each at its FIXED_DEFAULTS value;
# their other values are compared in their own section.
SECTION_AXES: dict[str, tuple[str, ...]] = {}
# How a non-default setting reads in a file name (also a strict, path-safe token).
_TOKEN: dict[str, str] = {}


def rebuild() -> None:
    """Derive the tables above from axes.AXES (at import, and after a change to AXES)."""
    for table in (SETTINGS, OLD_ROWS_READ_AS, FIXED_DEFAULTS, SECTION_AXES, _TOKEN):
        table.clear()
    ALWAYS_READ_AS.clear()
    sections: dict[str, list[str]] = {}
    for axis in axes.AXES:
        SETTINGS[axis.name] = (axis.column, axis.spec_field)
        if axis.read_old is not None:
            OLD_ROWS_READ_AS[axis.name] = axis.read_old
        if axis.always_read_old:
            ALWAYS_READ_AS.append(axis.name)
        if axis.default is not axes.HOST:
            FIXED_DEFAULTS[axis.name] = axis.default
        if axis.token:
            _TOKEN[axis.name] = axis.token
        if axis.section:
            sections.setdefault(axis.section, []).append(axis.name)
    SECTION_AXES.update({section: tuple(names) for section, names in sections.items()})


rebuild()
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
        """The identity of a row of any schema (axes.current_values reads an older row's settings as measured)."""
        current = axes.current_values(row)
        values = {name: current[column] for name, (column, _) in SETTINGS.items()}
        return cls(*(str(row.get(f)) for f in KEY_FIELDS), tuple(values.items()))

    @classmethod
    def of_spec(cls, spec) -> "CellIdentity":
        """The identity of a CellSpec: each axis's value from the spec's field for it, else from its axis_settings
        (an axis without a field of its own), else the axis's default."""
        given = dict(getattr(spec, "axis_settings", ()))
        values = {name: _plain(getattr(spec, attribute) if hasattr(spec, attribute) else
                               given[name] if name in given else axes.by_name()[name].unset_value)
                  for name, (_, attribute) in SETTINGS.items()}
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


def file_tokens(identity: CellIdentity, defaults: Mapping[str, Any]) -> list[str]:
    """Readable file-name tokens for the settings that differ from their defaults.

    `defaults` adds the host- and preset-dependent defaults (threads, warmup, steps). Settings
    without a token (device, image variant) are told apart by the settings hash when needed."""
    tokens = []
    all_defaults = {**FIXED_DEFAULTS, **defaults}
    for name, value in identity.settings:
        if name in _TOKEN and name in all_defaults and value != all_defaults[name]:
            tokens.append(_TOKEN[name].format(_slug(value)))  # per_step_sync's token is the word "nosync"
    return tokens


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", str(value))[:32]


def varying_settings(identities) -> set[str]:
    """The settings that take more than one value among these cell identities (the device model of two machines...):
    labels and titles name them, so that no two cells read as one."""
    values: dict[str, set] = {}
    for identity in identities:
        for name, value in identity.settings:
            values.setdefault(name, set()).add(value)
    return {name for name, seen in values.items() if len(seen) > 1}


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
