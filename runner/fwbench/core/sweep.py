"""Version sweeps: a sweep point (one package at one version, or every package as the index had it on a date),
and the index's list of a package's releases (for `fwbench bisect`).

A point is written the way rows carry it in their `sweep_point` identity setting: "transformers==4.38.2" or
"date:2024-03-01". None (no point) is an ordinary, unswept cell, and what rows written before sweeps read as.

Plain Python (the cell process and the aggregator import it); the index is asked over HTTP only by
`release_versions`, with the standard library.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass

# A distribution name (PEP 508) and a version (PEP 440 public versions; kept strict: it becomes a path and a
# requirement line).
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63}$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
DATE_PREFIX = "date:"
DEFAULT_INDEX = "https://pypi.org/simple"


class SweepError(ValueError):
    """A point or a listing that cannot be used (one line)."""


@dataclass(frozen=True)
class SweepPoint:
    package: str | None = None  # normalised distribution name (package points)
    version: str | None = None
    date: str | None = None  # YYYY-MM-DD (date points)

    @property
    def label(self) -> str:
        """The identity value: 'transformers==4.38.2' or 'date:2024-03-01'."""
        return f"{DATE_PREFIX}{self.date}" if self.date else f"{self.package}=={self.version}"

    @property
    def is_date(self) -> bool:
        return self.date is not None

    @property
    def exclude_newer(self) -> str:
        """uv's --exclude-newer for a date point: everything uploaded before the end of that day (UTC)."""
        day = dt.date.fromisoformat(self.date) + dt.timedelta(days=1)
        return f"{day.isoformat()}T00:00:00Z"

    def __str__(self) -> str:
        return self.label


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def package_point(package: str, version: str) -> SweepPoint:
    package, version = package.strip(), version.strip()
    if not _NAME.match(package):
        raise SweepError(f"not a package name: {package!r}")
    if not _VERSION.match(version):
        raise SweepError(f"not a version: {version!r} (package {package})")
    return SweepPoint(package=normalise(package), version=version)


def date_point(date: str) -> SweepPoint:
    date = date.strip()
    if not _DATE.match(date):
        raise SweepError(f"not a date: {date!r} (YYYY-MM-DD)")
    try:
        dt.date.fromisoformat(date)
    except ValueError:
        raise SweepError(f"not a date: {date!r} (YYYY-MM-DD)") from None
    return SweepPoint(date=date)


# Distributions that refuse a release of one another but their own: jax will not import beside a jaxlib of another
# version (its CUDA plugins are built for one jaxlib), and tensorflow-text's compiled ops are built against one
# tensorflow (another fails to load them: an undefined symbol). A point of any of a family moves the others its
# environment has to the releases the index resolves beside it (`family_requirements`); the rest stay as the lock has
# them (`--no-deps`). They are part of the point: a series over a package's versions does not count its family's
# versions as another environment (`moves_with`). torch is not here: torchvision, triton and the CUDA libraries of
# the lock ran beside other torch releases (uv pip check's complaints are on the rows).
@dataclass(frozen=True)
class Family:
    members: tuple[str, ...]
    # Each member at most the point's version: jax's own rule (a jaxlib newer than its jax is refused), and what
    # pairs an old jax at all, whose metadata names no jaxlib (only its [cpu] and [cuda] extras did).
    not_newer: bool = False


FAMILIES = (
    Family(("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin", "jax-cuda13-pjrt"),
           not_newer=True),
    Family(("tensorflow", "tensorflow-text")),  # tensorflow-text names its tensorflow: the resolver pairs them
)


def family_of(package: str) -> Family | None:
    name = normalise(package)
    return next((family for family in FAMILIES if name in family.members), None)


def moves_with(package: str) -> tuple[str, ...]:
    """The distributions a point of `package` moves with it, wherever its environment has them (FAMILIES)."""
    family = family_of(package)
    return tuple(m for m in family.members if m != normalise(package)) if family is not None else ()


def family_requirements(point: SweepPoint, present: list[str], extras: dict[str, str]) -> list[str]:
    """What the resolver is asked for to pair a package point with its family: the point's package at its version,
    and each member its environment has (`present`), unpinned or at most the point's version (Family.not_newer);
    each with the extras the stack requires it with (`extras`: name -> "[cuda12]"; jax[cuda12] pins its CUDA
    plugins to its own version)."""
    family = family_of(point.package)
    bound = f"<={point.version}" if family is not None and family.not_newer else ""
    return [f"{point.package}{extras.get(point.package, '')}=={point.version}",
            *(f"{name}{extras.get(name, '')}{bound}" for name in present if name != point.package)]


def resolved_versions(compiled: str, names: list[str]) -> dict[str, str]:
    """The versions of `names` in a resolver's output (`uv pip compile`'s name==version lines)."""
    wanted = {normalise(name) for name in names}
    found = {}
    for line in compiled.splitlines():
        requirement, sep, version = line.split("#", 1)[0].split(";", 1)[0].strip().partition("==")
        name = normalise(requirement.split("[")[0])
        if sep and name in wanted:
            found[name] = version.strip()
    return found


def installed_versions(sweep_installed: str) -> dict[str, str]:
    """A row's sweep_installed ("jax==0.10.1; jaxlib==0.10.1": '; '-separated name==version) as {name: version}, names
    normalised; an item of another form is skipped."""
    found = {}
    for item in sweep_installed.split(";"):
        name, sep, version = item.strip().partition("==")
        if sep and name.strip() and version.strip():
            found[normalise(name.split("[")[0].strip())] = version.strip()
    return found


def parse_vary(text: str) -> list[SweepPoint]:
    """--vary PACKAGE=V1,V2,... -> one point per version, in the order given."""
    package, sep, versions = text.partition("=")
    if not sep or not versions.strip():
        raise SweepError(f"--vary takes PACKAGE=V1,V2,... (got {text!r})")
    points = [package_point(package, v) for v in versions.split(",") if v.strip()]
    return _distinct(points)


def parse_dates(text: str) -> list[SweepPoint]:
    """--vary-date D1,D2,... -> one point per date, in the order given."""
    return _distinct([date_point(d) for d in text.split(",") if d.strip()])


def parse_label(label: str | None) -> SweepPoint | None:
    """A row's sweep_point back into a point (None stays None)."""
    if label is None:
        return None
    if label.startswith(DATE_PREFIX):
        return date_point(label[len(DATE_PREFIX):])
    package, sep, version = label.partition("==")
    if not sep:
        raise SweepError(f"not a sweep point: {label!r}")
    return package_point(package, version)


def _distinct(points: list[SweepPoint]) -> list[SweepPoint]:
    if len(set(points)) != len(points):
        raise SweepError("a point is given twice: " + ", ".join(p.label for p in points))
    return points


def sort_key(label: str | None):
    """Points in sweep order: by release (PEP 440) for one package, by date for dates; None (unswept) first."""
    from packaging.version import InvalidVersion, Version

    point = parse_label(label) if label else None
    if point is None:
        return (0, "", ())
    if point.is_date:
        return (1, "", (point.date,))
    try:
        return (2, point.package, (Version(point.version),))
    except InvalidVersion:
        return (3, point.package, (point.version,))


# --- the index's releases (bisect) ---------------------------------------------------------------------------

def index_url() -> str:
    """The index uv installs from: $UV_INDEX_URL or $UV_DEFAULT_INDEX, else PyPI."""
    return (os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("UV_INDEX_URL") or DEFAULT_INDEX).rstrip("/")


def fetch_simple_json(package: str, index: str | None = None, timeout: float = 30.0) -> dict:
    """The index's PEP 691 JSON page of a package (files with upload times, PEP 700 versions)."""
    url = f"{index or index_url()}/{normalise(package)}/"
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            kind = response.headers.get("Content-Type", "")
            if "json" not in kind:
                raise SweepError(f"{url} does not serve the JSON simple API (PEP 691); list versions by hand "
                                 "with --versions")
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise SweepError(f"the index has no package {package!r} ({url}: HTTP {exc.code})") from None
    except (urllib.error.URLError, OSError) as exc:
        raise SweepError(f"cannot list the releases of {package} at {url}: {exc}") from None


def releases_from_page(page: dict) -> list[str]:
    """Final releases (no pre-, dev- or yanked-only releases) of a PEP 691 page, oldest first."""
    return releases_for_python(page, None)[0]


def releases_for_python(page: dict, python: str | None) -> tuple[list[str], dict[str, str]]:
    """A PEP 691 page's final releases, oldest first, that Python `python` (e.g. "3.11.7"; None: any) can install
    (a file of theirs admits it by its requires-python), and {release: requires-python} of those it cannot."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.utils import parse_wheel_filename, parse_sdist_filename
    from packaging.version import Version

    live: dict[Version, str] = {}
    requires: dict[Version, list[str | None]] = {}
    for file in page.get("files", []):
        if file.get("yanked"):
            continue
        name = file.get("filename", "")
        try:
            version = (parse_wheel_filename(name)[1] if name.endswith(".whl") else parse_sdist_filename(name)[1])
        except Exception:  # noqa: BLE001 - a file name the index serves that packaging cannot read: skip it
            continue
        if not (version.is_prerelease or version.is_devrelease):
            live.setdefault(version, str(version))
            requires.setdefault(version, []).append(file.get("requires-python") or None)

    def admits(spec: str | None) -> bool:
        try:
            return spec is None or python is None or SpecifierSet(spec).contains(python, prereleases=True)
        except InvalidSpecifier:  # a requirement pip could not read either: let the install say
            return True

    kept, other_python = [], {}
    for version in sorted(live):
        if any(admits(spec) for spec in requires[version]):
            kept.append(live[version])
        else:  # every file states a requirement (a file without one admits any Python)
            other_python[live[version]] = requires[version][0]
    return kept, other_python


def listed_releases(package: str, versions: str | None) -> list[str]:
    """A package's releases, oldest first: `versions` (V1,V2,..., each a release version; SweepError naming
    `--versions lists` otherwise) or, without it, the index's final releases (releases_from_page)."""
    if versions:
        listed = dict.fromkeys(v.strip() for v in versions.split(",") if v.strip())
        return sorted(listed, key=lambda v: release_version(v, "--versions lists"))
    return releases_from_page(fetch_simple_json(package))


def release_version(text: str, what: str):
    """`text` as a PEP 440 version (packaging's Version); SweepError naming `what` it is when it is none (a branch
    name such as `main` is not a release)."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        raise SweepError(f"{what} {text!r} is not a release version (PEP 440, e.g. 4.38.2): bisect searches "
                         "released versions") from None


def versions_between(versions: list[str], good: str, bad: str) -> list[str]:
    """The releases from `good` to `bad` inclusive, in release order (either may be the older)."""
    from packaging.version import Version

    release_version(good, "--good")
    release_version(bad, "--bad")
    for version in versions:
        release_version(version, "--versions lists")
    ordered = sorted(dict.fromkeys(versions), key=Version)
    between = releases_in_range(ordered, good, bad)
    for end in (good, bad):
        if not any(Version(v) == Version(end) for v in between):
            raise SweepError(f"{end} is not a release the index lists (releases near it: "
                             f"{', '.join(_near(ordered, end))})")
    return between if Version(good) <= Version(bad) else between[::-1]


def releases_in_range(versions, good: str, bad: str) -> list[str]:
    """Those of `versions` from `good` to `bad` inclusive (either may be the older), oldest first."""
    from packaging.version import Version

    low, high = sorted((Version(good), Version(bad)))
    return sorted((v for v in versions if low <= Version(v) <= high), key=Version)


def _near(ordered: list[str], version: str) -> list[str]:
    from packaging.version import Version

    after = [i for i, v in enumerate(ordered) if Version(v) >= Version(version)]
    i = after[0] if after else len(ordered)
    return ordered[max(0, i - 2): i + 2] or ["none"]


def dates_between(good: str, bad: str) -> list[str]:
    """Every day from `good` to `bad` inclusive (a date bisect narrows to one day)."""
    start, end = dt.date.fromisoformat(good), dt.date.fromisoformat(bad)
    step = 1 if end >= start else -1
    return [(start + dt.timedelta(days=i * step)).isoformat() for i in range(abs((end - start).days) + 1)]
