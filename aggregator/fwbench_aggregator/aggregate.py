"""`aggregate` as a library call: results dirs in, report dir out (no CLI, no printing)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fwbench_aggregator import document, loading
from fwbench_aggregator.errors import AggregateUsageError, StrictModeError
from fwbench_aggregator.report import build_document
from fwbench_aggregator.summary import PresetSummary


@dataclass
class AggregateOutcome:
    report_md: Path
    report_html: Path
    merged: Path
    loaded: loading.LoadedResults
    summaries: list[PresetSummary]


def check_report_dir(result_dirs: list[Path], report_dir: Path) -> None:
    """The report goes next to the results, never into them: input folders stay byte-for-byte unchanged."""
    for root in result_dirs:
        root = Path(root)
        if root.is_dir() and loading.is_within(report_dir, root):
            raise AggregateUsageError(f"report dir {report_dir} is inside results dir {root}; "
                                      "choose a folder outside the results (inputs are never modified)")
    if report_dir.exists() and not report_dir.is_dir():
        raise AggregateUsageError(f"report dir {report_dir} exists and is not a directory")


def aggregate(result_dirs: list[Path], report_dir: Path, strict: bool = False,
              include_busy: bool = False) -> AggregateOutcome:
    result_dirs = [Path(p) for p in result_dirs]
    report_dir = Path(report_dir)
    if not result_dirs:
        raise AggregateUsageError("give at least one results directory")
    for root in result_dirs:
        if not root.exists():
            raise AggregateUsageError(f"no such file or directory: {root}")
    check_report_dir(result_dirs, report_dir)
    loaded = loading.load_results(result_dirs, exclude=report_dir, stability_only_ok=True)
    if strict and loaded.skipped:
        raise StrictModeError(f"{len(loaded.skipped)} result file(s) skipped and --strict is set; "
                              "no report written", skipped=loaded.skipped)
    report_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*report_dir.glob("ms_per_step-*.png"), *report_dir.glob("speedup-*.png"),
                  *report_dir.glob("stability.png")]:
        stale.unlink()  # plots of a preset no longer in the results must not linger next to the new report
    merged = loading.write_merged(loaded.table, report_dir / "merged.parquet")
    doc, summaries = build_document(loaded, report_dir, include_busy)
    report_md = report_dir / "report.md"
    report_md.write_text(document.to_markdown(doc, report_dir), encoding="utf-8")
    report_html = report_dir / "report.html"
    report_html.write_text(document.to_html(doc), encoding="utf-8")
    return AggregateOutcome(report_md, report_html, merged, loaded, summaries)
