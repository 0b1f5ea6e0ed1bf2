"""Bundles: results + their release (+ signature) + the report in one file to hand over, and opening one on
the verifier's side."""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path


from fwbench.release.record import ReleaseError, read_release


BUNDLE_RESULTS = "merged.parquet"


BUNDLE_FILES = ("release.json", "release.json.sig", "release.json.cosign.bundle")


class VerificationRefused(Exception):
    """A check failed before anything was re-run: one line, exit 1."""


def make_bundle(result_dirs: list[Path], release_path: Path, output: Path) -> Path:
    """merged rows + release.json (+ .sig) + the report, as one .tar.gz. Every ok row must have run in an
    image of the release (by digest), or there is nothing to verify it against."""
    from fwbench_aggregator.aggregate import aggregate

    release = read_release(release_path)
    with tempfile.TemporaryDirectory(prefix="fwbench-bundle-") as work:
        report_dir = Path(work) / "report"
        outcome = aggregate(result_dirs, report_dir, strict=False, include_busy=True)
        frame = outcome.loaded.frame()
        ok = frame[frame["status"] == "ok"]
        foreign = sorted({str(d) for d in ok["image_digest"] if not release.by_reference(str(d))})
        if ok.empty:
            raise ReleaseError("no ok rows to bundle")
        if foreign:
            raise ReleaseError(f"{len(foreign)} image(s) on the rows are not in {release_path}: {foreign[0]} "
                               "(run with `fwbench run --engine docker --release release.json`)")
        output.parent.mkdir(parents=True, exist_ok=True)
        tmp = output.with_name(f".{output.name}.tmp")
        with tarfile.open(tmp, "w:gz") as archive:
            for name in BUNDLE_FILES:
                source = release_path.with_name(name)
                if source.is_file():
                    archive.add(source, arcname=name)
            archive.add(report_dir, arcname="report")
        tmp.replace(output)
    return output


def open_bundle(bundle: Path, into: Path) -> Path:
    if not bundle.is_file():
        raise VerificationRefused(f"no bundle at {bundle}")
    try:
        with tarfile.open(bundle) as archive:
            archive.extractall(into, filter="data")  # refuses absolute paths, links out, devices
    except (tarfile.TarError, OSError) as exc:
        raise VerificationRefused(f"{bundle} is not a readable fwbench bundle: {exc}") from None
    for needed in ("release.json", f"report/{BUNDLE_RESULTS}"):
        if not (into / needed).is_file():
            raise VerificationRefused(f"{bundle} has no {needed} (make it with `fwbench bundle`)")
    return into
