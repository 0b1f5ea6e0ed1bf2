"""PNG plots (matplotlib, Agg backend: no display needed): ms/step bars with CIs, speed-ups, stability losses and
data-parallel scaling."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

from fwbench_aggregator.summary import SPEEDUP_BASELINES, PresetSummary, speedup_percent
from fwbench_aggregator.variants import NATIVE_EAGER, Variant

LOG_SCALE_SPREAD = 20  # use a log axis when the slowest bar is this many times the fastest
TITLE_LAYOUT_TRIES = 6  # lay a figure out at most this many times while its titles are wrapped to fit


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # headless: CI and servers have no display
    import matplotlib.pyplot as plt

    return plt


def fit_titles(fig, *titles) -> None:
    """Lays the figure out (tight_layout) with each title wrapped onto as many lines as it needs to be drawn whole: an
    axes' title within its axes' width (it must not run over a neighbouring panel), the figure's title within the
    figure's. A long device name or settings list would otherwise run off both edges and be cut off in the PNG."""
    given = {title: title.get_text() for title in titles}
    for _ in range(TITLE_LAYOUT_TRIES):
        fig.tight_layout()
        renderer = fig.canvas.get_renderer()
        rewrapped = False
        for title, text in given.items():
            room = (title.axes.get_window_extent(renderer) if title.axes is not None else fig.bbox).width
            drawn = title.get_window_extent(renderer)
            if drawn.width <= room:
                continue
            # Characters per line in proportion to the room, a little under so that the next layout fits.
            longest = max(len(line) for line in title.get_text().splitlines())
            columns = max(int(longest * room / drawn.width) - 2, 10)
            title.set_text("\n".join(textwrap.fill(line, columns) for line in text.splitlines()))
            rewrapped = True
        if not rewrapped:
            return
    fig.tight_layout()  # out of tries: at least lay the last wrapping out


def chart_subject(summary: PresetSummary) -> str:
    """'preset tiny, precision published, on Test CPU (cpu)': what a chart's numbers are of (device models from the
    rows' identities; row text, so titles are drawn with parse_math off)."""
    models = sorted({str(identity.setting("device_model")) for identity in summary.identities.values()
                     if identity.setting("device_model")})
    kinds = sorted({facts.device for facts in summary.facts.values() if facts.device})
    where = ", ".join(models) or "an unrecorded device"
    return (f"preset {summary.preset}, precision {summary.precision}, on {where}"
            + (f" ({', '.join(kinds)})" if kinds else ""))


def ms_per_step_chart(summary: PresetSummary, path: Path) -> Path | None:
    """Grouped bars: one group per task, one bar per variant, whiskers = 95% CI."""
    if not summary.estimates:
        return None
    plt = _pyplot()
    tasks, variants = summary.tasks, summary.variants
    width = 0.8 / max(len(variants), 1)
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(tasks) + 3), 5))
    medians = [e.median for e in summary.estimates.values() if e.median > 0]
    busy_shown = False
    for i, variant in enumerate(variants):
        xs, ys, errors, busy_xs, busy_ys = [], [], [[], []], [], []
        for t, task in enumerate(tasks):
            est = summary.estimates.get((task, variant))
            if est is None:
                if (task, variant) in summary.busy_estimates:  # shown hatched, not left blank like a failure
                    busy_xs.append(t - 0.4 + width * (i + 0.5))
                    busy_ys.append(summary.busy_estimates[(task, variant)].median)
                continue
            xs.append(t - 0.4 + width * (i + 0.5))
            ys.append(est.median)
            errors[0].append(max(est.median - est.low, 0))
            errors[1].append(max(est.high - est.median, 0))
        bars = ax.bar(xs, ys, width, yerr=errors, capsize=2, label=variant.label)
        if busy_xs:
            ax.bar(busy_xs, busy_ys, width, color=bars.patches[0].get_facecolor() if bars.patches else None,
                   alpha=0.35, hatch="//", edgecolor="black", linewidth=0.5,
                   label=None if busy_shown else "hatched: measured only busy (not ranked)")
            busy_shown = True
    if medians and max(medians) / min(medians) > LOG_SCALE_SPREAD:
        ax.set_yscale("log")
    ax.set_xticks(range(len(tasks)), tasks, rotation=30, ha="right")
    ax.set_ylabel("ms per step (median, 95% CI; lower is better)")
    title = ax.set_title(f"ms per step by task, {chart_subject(summary)}", parse_math=False)
    ax.legend(fontsize=8)
    fit_titles(fig, title)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def speedup_series(summary: PresetSummary) -> tuple[str, dict[str, list[float | None]]]:
    """Keras 3 best over each published baseline when Keras 3 ran; otherwise every variant over eager torch (else the
    first column). Each bar compares cells of one like-for-like group: a series per baseline and group."""
    groups = list(dict.fromkeys(settings for task in summary.tasks for settings in summary.groups(task)))

    def named(name: str, settings: tuple) -> str:
        text = Variant("", "", settings).settings_text
        return f"{name} [{text}]" if text else name

    if any(v.is_keras3 for v in summary.variants):
        return ("Keras 3 best vs each baseline", {named(name, settings): [summary.speedup(t, key, settings) for t in summary.tasks]
                                    for name, key in SPEEDUP_BASELINES for settings in groups})
    base_key = NATIVE_EAGER if any(v.key == NATIVE_EAGER for v in summary.variants) else summary.variants[0].key
    series: dict[str, list[float | None]] = {}
    for variant in summary.variants:
        if variant.key == base_key:
            continue
        values = []
        for task in summary.tasks:
            base = summary.baseline(task, base_key, variant.settings)
            est = summary.estimates.get((task, variant))
            values.append(speedup_percent(base.median, est.median) if base and est else None)
        series[variant.label] = values
    return (f"speed-up over {Variant(*base_key).label}", series)


def speedup_chart(summary: PresetSummary, path: Path) -> Path | None:
    title, series = speedup_series(summary)
    series = {name: values for name, values in series.items() if any(v is not None for v in values)}
    if not series:
        return None
    # Only tasks with at least one bar: empty rows would read as "no speed-up".
    keep = [i for i in range(len(summary.tasks)) if any(v[i] is not None for v in series.values())]
    tasks = [summary.tasks[i] for i in keep]
    series = {name: [values[i] for i in keep] for name, values in series.items()}
    plt = _pyplot()
    height = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(9, max(4, 0.45 * len(tasks) * max(1, len(series) / 2) + 1.5)))
    for i, (name, values) in enumerate(series.items()):
        ys = [t - 0.4 + height * (i + 0.5) for t, v in enumerate(values) if v is not None]
        ax.barh(ys, [v for v in values if v is not None], height, label=name)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(tasks)), tasks)
    ax.invert_yaxis()
    ax.set_xlabel("speed-up % = (baseline ms / ms - 1) x 100 (right of 0 = faster)")
    drawn_title = ax.set_title(f"{title}, {chart_subject(summary)}", parse_math=False)
    ax.legend(fontsize=8)
    fit_titles(fig, drawn_title)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


STABILITY_CHARTS = 12  # at most this many loss panels in the stability chart (the table lists every record)


def stability_chart(records: list[dict], path: Path) -> Path | None:
    """One panel per stability record that ran both fits: the loss per step at its precision and at fp32 (log
    axis: the learnable target's loss falls by orders of magnitude; a planted overflow step stands out)."""
    shown = [r for r in records if r.get("losses") and r.get("baseline_losses")][:STABILITY_CHARTS]
    if not shown:
        return None
    plt = _pyplot()
    columns = min(3, len(shown))
    rows = (len(shown) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.0 * rows), squeeze=False)
    for ax, record in zip(axes.flat, shown):
        for key, label in (("baseline_losses", "fp32"), ("losses", record["precision"])):
            ax.plot(range(len(record[key])), record[key], label=label, linewidth=1)
        ax.set_yscale("log")
        ax.set_title(f"{record['stack']} {record['task']}", fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.legend(fontsize=7)
    return _save_panels(plt, fig, axes, len(shown), "loss per step: the precision against fp32 (fwbench stability)",
                        path)


def _save_panels(plt, fig, axes, used: int, title: str, path: Path) -> Path:
    """A grid of panels saved as a PNG: the unused panels hidden, one title over them all."""
    for ax in list(axes.flat)[used:]:
        ax.set_visible(False)
    fit_titles(fig, fig.suptitle(title, fontsize=10), *(ax.title for ax in list(axes.flat)[:used]))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


SCALING_CHARTS = 12  # at most this many panels in the scaling chart (the table lists every cell)


@dataclass
class ScalingPanel:
    """One task, preset and settings group of the scaling chart: per stack (in report order), its
    (N, speed-up, (low, high) or None) points."""

    title: str
    no_speed_claim: bool  # CPU rows: N logical devices sharing the cell's cores
    series: dict[str, list[tuple[int, float, tuple[float, float] | None]]]


def scaling_chart(panels: list[ScalingPanel], path: Path) -> Path | None:
    """Speed-up against N, one line per stack with 95% interval bars, and the ideal speed-up = N; a panel per group."""
    shown = [p for p in panels if p.series][:SCALING_CHARTS]
    if not shown:
        return None
    plt = _pyplot()
    # One colour per stack across every panel, so a stack reads the same everywhere.
    labels = list(dict.fromkeys(label for p in shown for label in p.series))
    colours = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    columns = min(3, len(shown))
    rows = (len(shown) + columns - 1) // columns
    # At least 6 inches wide: one panel alone must still fit the figure's title.
    fig, axes = plt.subplots(rows, columns, figsize=(max(4.6 * columns, 6.0), 3.8 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, shown):
        ns = sorted({n for points in panel.series.values() for n, _, _ in points})
        ax.plot([1, ns[-1]], [1, ns[-1]], color="grey", linestyle="--", linewidth=1, label="ideal (speed-up = N)")
        # Stacks side by side: a small horizontal offset each, so their interval bars do not hide one another.
        dodge = 0.025 * max(ns[-1] - 1, 1)
        for i, (label, points) in enumerate(panel.series.items()):
            offset = (i - (len(panel.series) - 1) / 2) * dodge
            points = sorted(points)
            xs = [n + offset for n, _, _ in points]
            ys = [value for _, value, _ in points]
            errors = [[max(value - (iv[0] if iv else value), 0) for _, value, iv in points],
                      [max((iv[1] if iv else value) - value, 0) for _, value, iv in points]]
            ax.errorbar(xs, ys, yerr=errors, marker="o", capsize=3, linewidth=1.2, color=colours[label], label=label)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_ylim(bottom=0)
        ax.set_xlabel("devices N", fontsize=8)
        ax.set_ylabel("speed-up (samples/s vs N=1)", fontsize=8)
        title = panel.title + ("\nCPU devices: no speed claim" if panel.no_speed_claim else "")
        # parse_math off: the title holds row text (the device model), which a stray "$" must not break.
        ax.set_title(title, fontsize=9, color="#8a4b00" if panel.no_speed_claim else "black", parse_math=False)
        if panel.no_speed_claim:
            ax.text(0.5, 0.5, "no speed claim", transform=ax.transAxes, ha="center", va="center", fontsize=16,
                    color="#8a4b00", alpha=0.25, rotation=20)
        ax.legend(fontsize=7, loc="upper left")
    title = "data-parallel speed-up vs devices N (95% intervals; dashed: ideal)"
    return _save_panels(plt, fig, axes, len(shown), title, path)
