"""A GPU results page (docs/results-<gpu>.md) from a published kit folder (benchmarks/results/<date>-<gpu>/): the
generated block (what ran and on what, the settings that vary among the rows, the GPU checks, every cell with its
interval and physics columns, per task the ratio between stacks beside the published A100 ratio with the judge's
word on it, the model files ranked by the judge), and every figure the page's prose cites (fwbench.kit.figures).

    fwbench kit page benchmarks/results/2026-11-26-nvidia-h100-80gb-hbm3 docs/results-h100.md
    fwbench kit page benchmarks/results/2026-11-26-nvidia-h100-80gb-hbm3 --print   # the block

The first form rewrites the block and refills every `<!--f NAME-->` figure of the prose; the block is also a
benchmarks/docblocks.py block (`python -m fwbench.cli kit page FOLDER --print`), so tests check it like every
generated block.

Reads rows with pyarrow and the aggregator's statistics only (no framework import).
"""

from __future__ import annotations

import json
from pathlib import Path

from fwbench.core import model_file
from fwbench.core.atomic import write_atomically
from fwbench.kit import figures as page_figures
from fwbench.kit.estimates import published_step_s
from fwbench.kit.figures import BASELINE, PUBLISHED, Cell, is_published
from fwbench.kit.image import NOT_ON_THIS_HOST
from fwbench.kit.layout import REPO, KitError
from fwbench.kit.plan import default_tasks, default_variants, priority
from fwbench.kit.rows import all_rows
from fwbench_aggregator import judge, model_files, stats

END = "<!-- END generated -->"
VERSIONS = ("torch", "jax", "jaxlib", "jax-cuda13-plugin", "transformers", "keras", "keras-hub", "diffusers",
            "segment-anything", "peft", "numpy", "nvidia-cudnn-cu13", "nvidia-cublas")


def begin(folder: Path) -> str:
    shown = folder.relative_to(REPO) if folder.is_relative_to(REPO) else folder
    return f"<!-- BEGIN generated: python -m fwbench.cli kit page {shown} --print -->"


def figures(folder: Path, rows: list[dict] | None = None) -> page_figures.Figures:
    return page_figures.Figures(folder, load_rows(folder) if rows is None else rows, published_step_s, planned())


def load_rows(folder: Path) -> list[dict]:
    return all_rows(folder / "rows")


def fmt(value, digits: int = 1, scale: float = 1.0) -> str:
    return "—" if value is None or (isinstance(value, float) and value != value) else f"{value * scale:.{digits}f}"


def interval_kind(ok: list) -> str:
    return "process-to-process" if len(ok) >= judge.MIN_REPEATS else "step-to-step"


def header(folder: Path, rows: list[dict]) -> list[str]:
    host = json.loads((folder / "host.json").read_text())
    earlier = [json.loads(path.read_text()) for path in sorted(folder.glob("host-*.json"))]
    windows = [h.get("recorded_at", "?") for h in [*earlier, host]]
    nvml = host.get("nvml") or {}
    versions = host.get("versions") or {}
    lines = [f"- **GPU**: {', '.join(nvml.get('gpu_names') or ['?'])}, driver {nvml.get('gpu_driver')}, CUDA "
             f"{nvml.get('cuda_driver')}; {host.get('cpu_count')} CPU cores ({host.get('cpu_model')}); "
             f"{host.get('platform')}",
             f"- **Windows**: {len(windows)}, recorded at {', '.join(windows)} (UTC); the machine ran nothing else",
             f"- **Python** {host.get('python')} ({host.get('python_executable')}); fwbench `--engine current` "
             f"(the host's own libraries; KerasHub, Keras, diffusers and segment-anything from the kit's "
             f"wheelhouse)",
             "- **Versions that ran**: " + ", ".join(f"{name} {versions[name]}" for name in VERSIONS if name in versions),
             f"- **Rows**: {len(rows)} (`benchmarks/results/{folder.name}/rows/`), "
             f"{sum(r['status'] == 'ok' for r in rows)} ok, "
             f"{sum(bool(r.get('busy')) for r in rows if r['status'] == 'ok')} of them busy (busy rows decide nothing)",
             *varying_settings(rows)]
    return lines


def varying_settings(rows: list[dict]) -> list[str]:
    """What differs among the rows beyond the cell identity: settings a reader must know to read one figure
    against another (the compile cache moves step time; timed steps are part of the identity)."""
    ok = [r for r in rows if r["status"] == "ok"]
    lines = []
    caches: dict[str, dict[str, int]] = {}
    for row in ok:
        state = page_figures.cache_state(row)
        caches.setdefault(row["stack"], {}).setdefault(state, 0)
        caches[row["stack"]][state] += 1
    lines.append("- **Compile cache** (ok rows; a warm cache loads compiled code, so the first step is then mostly a "
                 "load, and the judge never pools a cell's warm and cold rows): " + "; ".join(
                     f"{stack}: " + ", ".join(f"{state} {n}" for state, n in sorted(states.items()))
                     for stack, states in sorted(caches.items())))
    steps: dict[str, set] = {}
    for row in ok:
        steps.setdefault(row["task"], set()).add(row.get("timed_steps"))
    lines.append("- **Timed steps**: " + "; ".join(f"{task} {'/'.join(map(str, sorted(found)))}"
                                                   for task, found in sorted(steps.items())))
    library: dict[str, set] = {}
    for row in ok:
        versions = row.get("library_versions")
        versions = json.loads(versions) if isinstance(versions, str) and versions.strip() else versions
        for name, version in (versions or {}).items():
            library.setdefault(name, set()).add(str(version))
    differing = {name: found for name, found in library.items() if len(found) > 1}
    lines.append("- **Library versions among the rows**: " + (
        "; ".join(f"{name} {', '.join(sorted(found))}" for name, found in sorted(differing.items()))
        if differing else ("the same on every row that records them" if library else "not recorded on these rows")))
    commits = sorted({r.get("source_commit") for r in rows if r.get("source_commit")})
    schemas = sorted({int(r["schema_version"]) for r in rows if r.get("schema_version") is not None})
    lines.append("- **Source commit**: " + (", ".join(commits) if commits else
                                            f"not recorded on these rows (schema {', '.join(map(str, schemas))}; rows "
                                            "record it from schema 14)"))
    return lines


def checks_section(folder: Path) -> list[str]:
    path = folder / "checks.txt"
    if not path.is_file():
        return ["No checks ran."]
    return ["| verdict | check | detail |", "|---|---|---|"] + [
        f"| {line[:4].strip()} | {line[5:].split(':', 1)[0]} | {line[5:].split(':', 1)[1].strip()[:220].replace('|', '/')} |"
        for line in path.read_text().splitlines() if line.strip()]


def cells_section(cells: list[Cell]) -> list[str]:
    """The cells table; its `GPU busy %` column (NVML's share of the timed window a kernel ran, extra.gpu_busy) only
    where some cell's rows have it (rows from before the harness sampled it have none)."""
    busy = any(cell.gpu_busy() is not None for cell in cells)
    columns = (["task", "stack [compile]", "precision", "timed steps", "ok repeats", "ms/step (median)",
                "95% interval", "interval over", "TFLOP/s", "% of peak (matmul precision)", "MBU %"]
               + (["GPU busy %"] if busy else []) + ["J/step", "peak memory GB", "first step s", "status"])
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for cell in sorted(cells, key=order):
        ok = cell.ok
        if not ok:
            last = cell.rows[-1]
            message = (last.get("error_message") or "").splitlines()[0][:170].replace("|", "/")
            status = last["status"] if last["status"] != "ok" else "busy (decides nothing)"
            out.append(f"| {cell.task} | {cell.label} | {cell.precision} | {cell.steps} | 0 | "
                       + "— | " * (len(columns) - 6) + f"{status}: {message} |")
            continue
        estimate = stats.estimate(cell.samples())
        precision = ok[0].get("matmul_compute_precision") or ok[0].get("precision")
        out.append(f"| {cell.task} | {cell.label} | {cell.precision} | {cell.steps} | {len(ok)} | "
                   f"{stats.fmt_ms(estimate.median)} | "
                   f"{stats.fmt_ms(estimate.low)}–{stats.fmt_ms(estimate.high)} | {interval_kind(ok)} | "
                   f"{fmt(cell.mean('achieved_tflops'))} | {fmt(cell.mean('pct_of_peak'))} ({precision}) | "
                   f"{fmt(cell.mean('pct_of_bandwidth'))} | " + (f"{fmt(cell.gpu_busy())} | " if busy else "")
                   + f"{fmt(cell.mean('joules_per_step'))} | "
                   f"{fmt(cell.mean('peak_mem_bytes'), 1, 1e-9)} | {fmt(cell.mean('first_step_s'))} | ok |")
    return out


def precision_rank(precision: str | None) -> tuple:
    """The published precision first, then the others by name."""
    return (not is_published(precision), precision or "")


def order(cell: Cell) -> tuple:
    return (precision_rank(cell.precision), priority(cell.task, cell.stack, cell.mode), cell.task,
            (cell.stack, "none") != BASELINE, cell.stack, cell.mode, cell.part)


def ratios_section(cells: list[Cell]) -> list[str]:
    """One table per precision. Only the published precision's ratios stand beside the published A100 ratios: the
    published table has no row at another precision, so a bf16 ratio set against it would compare two precisions.
    Another precision's table shows instead the same cell's ratio at the published precision measured here. The
    judge's column says whether the rows rank the two, and on how many processes."""
    out, ordered = [], [cell for cell in sorted(cells, key=order) if cell.ok]
    for precision in sorted({cell.precision for cell in cells}, key=precision_rank):
        if is_published(precision):
            out += [f"At the published precision (`--precision {PUBLISHED}`):", "",
                    "| task | stack [compile] / native-torch [none] | measured ratio [95% interval] | "
                    "published A100 ratio | measured ÷ published | the judge |", "|---|---|---|---|---|---|"]
        else:
            out += [f"At `--precision {precision}` (every stack's compute at {precision}: like with like; the "
                    "published table has no such rows, so there is nothing published to set them beside):", "",
                    "| task | stack [compile] / native-torch [none] | measured ratio [95% interval] | "
                    "same cells at the published precision, measured here | the judge |", "|---|---|---|---|---|"]
        for cell in (cell for cell in ordered if cell.precision == precision):
            base = page_figures.baseline_of(cells, cell)
            if base is None or base is cell:
                continue
            measured = stats.ratio_estimate(cell.samples(), base.samples())
            line = f"| {cell.task} | {cell.label} | {page_figures.ratio_text(measured)} | "
            if is_published(precision):
                ratio = page_figures.published_ratio(published_step_s(cell.task), cell, base)
                line += f"{fmt(ratio, 3)} | {'—' if ratio is None else f'{measured.ratio / ratio:.2f}'} | "
            else:
                twins = [c for c in ordered if (c.task, c.stack, c.mode, c.steps) == (cell.task, cell.stack, cell.mode,
                                                                                      cell.steps)
                         and is_published(c.precision)]
                twin_base = page_figures.baseline_of(cells, twins[0]) if len(twins) == 1 else None
                line += ("— (not run)" if twin_base is None else page_figures.ratio_text(
                    stats.ratio_estimate(twins[0].samples(), twin_base.samples()))) + " | "
            out.append(line + page_figures.verdict_words(cell, base) + " |")
        out.append("")
    return out[:-1]


def not_run_section(cells: list[Cell]) -> list[str]:
    ran = {(cell.task, cell.stack, cell.mode) for cell in cells if cell.ok and is_published(cell.precision)}
    missing = [f"{task} {stack} [{mode}]" for task in default_tasks() for stack, mode in default_variants()
               if (stack, task) not in NOT_ON_THIS_HOST and (task, stack, mode) not in ran]
    left_out = sorted({f"{task} {stack}" for stack, task in NOT_ON_THIS_HOST})
    return [f"Not yet run ({len(missing)} of the {planned()} cells of the kit's plan at the published precision): "
            + ", ".join(missing) + ".", "", "Cannot run on this host (no TensorFlow, so no KerasCV): "
            + ", ".join(left_out) + "."]


def planned() -> int:
    return sum((stack, task) not in NOT_ON_THIS_HOST for task in default_tasks() for stack, _mode in default_variants())


def is_model_file_row(row: dict) -> bool:
    return model_file.parse_task(row.get("task")) is not None


def models_section(rows: list[dict]) -> list[str]:
    """Users' model files (the kit's --models): per file and task kind, the backends fastest first with the
    interval of the median and how many times slower than the fastest each is, the judge's word on each against
    the fastest, and what the physics columns say."""
    tables: dict[tuple, list[dict]] = {}
    for row in rows:  # one table per the report's rule: every identity setting held equal but a backend's own
        tables.setdefault(model_files.table_key(row), []).append(row)
    if not tables:
        return ["No model files ran."]
    out = []
    for key, members in sorted(tables.items(), key=lambda item: item[0][0]):
        backends = {cell.label: cell for cell in page_figures.cells_of(members)}
        first = members[0]
        task, sha, precision, steps = key[0], first.get("model_sha256"), first.get("precision"), first.get("timed_steps")
        parsed = model_file.parse_task(task)
        ranking = judge.rank({label: cell.samples() for label, cell in backends.items() if cell.ok})
        ranked = list(ranking.order) if ranking else []
        repeats = sorted({len(cell.ok) for cell in backends.values() if cell.ok})
        verdict = ("no backend ran" if ranking is None else f"the judge names {ranking.winner} fastest"
                   if ranking.winner else f"the judge cannot rank {ranked[0]} above "
                   + ", ".join(c for c in ranking.not_ranked[1:]))
        out += [f"**{parsed.model}, {parsed.kind}, batch {parsed.batch}** (file SHA-256 {(sha or '?')[:12]}…, "
                f"precision {precision}, {steps} timed steps, {'/'.join(map(str, repeats))} repeat(s): "
                f"{interval_kind([None] * min(repeats or [0]))} intervals; {verdict})", "",
                "| rank | backend | ms/step (median) [95% interval] | × fastest [95% interval] | the judge | TFLOP/s | "
                "% of peak (matmul precision) | first step s | peak memory GB | twin's parameters |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for place, label in enumerate(ranked, 1):
            cell = backends[label]
            estimate = stats.estimate(cell.samples())
            if place == 1:
                versus, word = "fastest", "—"
            else:
                ratio = stats.ratio_estimate(cell.samples(), backends[ranked[0]].samples())
                versus = f"{ratio.ratio:.2f} [{ratio.low:.2f}–{ratio.high:.2f}]"
                word = ranking.against_fastest[label].word
                word = "slower" if word == judge.FASTER else word
            twin = cell.ok[0].get("twin_params_match")
            twin_text = "—" if twin is None else ("the Keras model's" if twin else
                                                  f"differ (Keras {cell.ok[0].get('twin_params_keras')})")
            out.append(f"| {place} | {label} | {stats.fmt_ms(estimate.median)} [{stats.fmt_ms(estimate.low)}–"
                       f"{stats.fmt_ms(estimate.high)}] | {versus} | {word} | {fmt(cell.mean('achieved_tflops'), 2)} | "
                       f"{fmt(cell.mean('pct_of_peak'))} ({cell.ok[0].get('matmul_compute_precision') or '?'}) | "
                       f"{fmt(cell.mean('first_step_s'))} | {fmt(cell.mean('peak_mem_bytes'), 2, 1e-9)} | {twin_text} |")
        for label, cell in sorted(backends.items()):
            if not cell.ok:
                message = (cell.rows[-1].get("error_message") or "").splitlines()[0][:120].replace("|", "/")
                out.append(f"| — | {label} | — | — | — | — | — | — | — | {cell.rows[-1]['status']}: {message} |")
        out.append("")
    return out


def generate(folder: Path) -> str:
    """The generated block's body (without its BEGIN line)."""
    rows = load_rows(folder)
    models = [row for row in rows if is_model_file_row(row)]
    cells = page_figures.cells_of([row for row in rows if row.get("preset") == "paper" and not is_model_file_row(row)])
    few = judge.MIN_REPEATS
    lines = ["", "### What ran", "", *header(folder, rows), "", "### GPU checks", "", *checks_section(folder),
             "", "### Cells", "",
             "Each cell at the published sizes (`--preset paper`), at the precision in its row (`published`: each "
             "stack's as in the published table; `bf16`: every stack's compute in bf16), timed steps as the kit gave them "
             "(fewer than the preset's 100 where the window shortened them: a cell identity "
             "of its own, the same for every stack of a task). A cell whose rows differ in the compile cache's state "
             "is split into its parts, never pooled. The interval is the report's two-level bootstrap of the median: "
             f"over steps only (step-to-step) where a cell has fewer than {few} repeats, which leaves "
             "process-to-process variation out.", "", *cells_section(cells), "",
             "### Ratios between stacks", "",
             "Each stack's median over native-torch [none]'s at the same timed steps and precision (< 1: faster "
             "than native PyTorch eager), with the bootstrap interval (step-to-step where a side has fewer than "
             f"{few} repeats), and the judge's verdict (fwbench's one rule for every ranking: with fewer than {few} "
             "processes a side it widens the interval by an assumed process-to-process spread, and a verdict "
             "resting on so few processes is not settled). At the published precision, beside the same ratio in "
             "the published A100 table; another GPU, other library versions and shortened timed windows stand "
             "between the two, so a differing ratio is a finding to explain, not an error.", "",
             *ratios_section(cells), "", *not_run_section(cells), "",
             "### Your models", "",
             "Model files (`fwbench kit window --models`, [your-model.md](your-model.md)) on every backend that ran "
             "them, fastest first by the median (an order, not a claim: the judge's column says which are ranked): "
             f"the median's interval and the ratio to the fastest are the report's bootstrap (step-to-step with "
             f"fewer than {few} repeats); the first step (trace and compile) is apart.", "",
             *models_section(models)]
    return "\n".join(lines).rstrip("\n") + "\n"


def update_page(folder: Path, text: str) -> str:
    """The page with its generated block and every prose figure made anew from the folder's rows."""
    head = begin(folder)
    if head not in text or END not in text.split(head, 1)[1]:
        raise ValueError(f"no generated block ({head} ... {END})")
    before, rest = text.split(head, 1)
    after = rest.split(END, 1)[1]
    found = figures(folder)
    return page_figures.refill(before, found) + head + "\n" + generate(folder) + END + page_figures.refill(after, found)


def write_page(folder: Path, page: Path) -> None:
    """Rewrite the page's block and refill its prose figures (a page not there yet gets a title and the block)."""
    text = page.read_text() if page.is_file() else f"# Results\n\n{begin(folder)}\n{END}\n"
    try:
        updated = update_page(folder, text)
    except ValueError as error:  # FigureError too
        raise KitError(f"{page}: {error}") from None
    write_atomically(page, updated)


def check_folder(folder: Path) -> Path:
    if not (folder / "host.json").is_file():
        raise KitError(f"{folder} has no host.json: not a published kit folder")
    return folder.resolve()
