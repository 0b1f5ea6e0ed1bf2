"""Pin sets: which library versions a stack's environment or image installs, and how the `paper-2024` set
differs from the published run.

A pin set is a folder per stack, images/<stack>/<pin-set>/ (requirements, hash-locked lock files), used
alike by the images (build arg PIN_SET, tag fwbench/<stack>:<pin-set>-<variant>) and by the local engine
(one environment per stack and pin set). Within a pin set every stack that shares a package pins the same
version, and a CPU variant differs from its GPU variant only in CUDA packages (tests/test_locks.py).

  current     today's releases of every framework and model library.
  paper-2024  the versions of the published Keras 3 benchmark run (keras-benchmarks v0.0.5, 2024), except
              where PyPI no longer serves them or a hash-locked install cannot take them (each stack's
              definition lists its published pins and deviations: fwbench.core.registry).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol

PIN_SETS = ("current", "paper-2024")
DEFAULT_PIN_SET = "current"
# The pin set whose rows the report puts beside the published table.
PUBLISHED_PIN_SET = "paper-2024"
# The CPython every lock file is resolved for (images/lock.sh) and the images run.
LOCKED_PYTHON = "3.11"

# What the published run asked for that every Keras stack shared (its requirements/keras-common.txt), on
# Python 3.10. Each stack's own published pins are on its definition (fwbench.core.registry.Stack.published_pins).
PUBLISHED_PYTHON = "3.10"
KERAS_COMMON_PINS = (("keras-nlp", "0.8.2"), ("keras-cv", "0.8.2"), ("tf-keras", "2.15.0"),
                     ("tensorflow-datasets", "4.9.3"))


@dataclass(frozen=True)
class Deviation:
    """One way a stack's paper-2024 pin set differs from the published run, on purpose."""

    package: str
    published: str
    used: str
    reason: str

    def label(self) -> str:
        return f"{self.package} {self.used} (published {self.published})"


PYTHON_DEVIATION = Deviation("python", PUBLISHED_PYTHON, LOCKED_PYTHON,
                             "the images' Debian bookworm base has Python 3.11 (a 3.10 base cannot be built where "
                             "CI runs); every pinned wheel exists for 3.11")


def normalise(name: str) -> str:
    """A distribution name as PyPI compares them (PEP 503): tf_keras, TF.Keras and tf-keras are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


_PINNED = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^\s;\\]+)")


def pinned_versions(path: Path) -> dict[str, str]:
    """Distribution -> version of every `name[extras]==version` line of a requirements or lock file."""
    found = {}
    for line in Path(path).read_text().splitlines():
        if match := _PINNED.match(line):
            found[normalise(match.group(1))] = match.group(3)
    return found


class PinnedStack(Protocol):
    """What pin_deviations reads of a stack (fwbench.core.registry.Stack has it; registry imports this module)."""

    published_pins: tuple[tuple[str, str], ...]
    pin_deviations: tuple[Deviation, ...]


def pin_deviations(stack: PinnedStack, pin_set: str, installed: Mapping[str, str], python_version: str) -> list[str]:
    """How the libraries a paper-2024 cell really ran differ from the published pins: the stack's declared
    deviations, then anything else found ("undeclared: ..."), so a drifted environment cannot pass as
    published. Empty for other pin sets (they do not claim the published versions)."""
    if pin_set != PUBLISHED_PIN_SET or not stack.published_pins:
        return []
    found = {normalise(name): version for name, version in installed.items()}
    found["python"] = ".".join(python_version.split(".")[:2])
    declared = {d.package: d for d in stack.pin_deviations}
    labels = []
    for package, published in stack.published_pins:
        used = found.get(package)
        deviation = declared.get(package)
        if deviation is not None and used == deviation.used:
            labels.append(deviation.label())
        elif used != published:
            labels.append(f"undeclared: {package} {used or 'missing'} (published {published})")
    return labels
