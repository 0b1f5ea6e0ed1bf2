"""`fwbench verify`: every check first (signature, then each image against the release), then the re-runs in
exactly the released images with each published cell's settings, then the comparison and the report.

Inconclusive cells get more re-run repeats (new repeat indices, through run_matrix with resume) in batches of
--repeats up to --max-repeats a cell, judged again after each batch at levels adjusted for the number of looks
(fwbench_aggregator.verification: look_schedule, with_added_repeats), except a cell the cap cannot decide
(decidable_by); no batch starts once the added re-runs have taken --max-added-minutes.
"""

from __future__ import annotations

import hashlib
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

from fwbench.core import axes, registry
from fwbench.core.identity import FIXED_DEFAULTS, SETTINGS, CellIdentity
from fwbench.release.record import read_release
from fwbench.core.atomic import write_atomically
from fwbench.release.bundle import VerificationRefused, bundle_digest, open_bundle
from fwbench.core.spec import CellSpec

SPEC_FIELDS = {field.name for field in fields(CellSpec)}


def check_signature(bundle_dir: Path, allowed_signers: Path | None, allow_unsigned: bool,
                    cosign_identity: str | None = None) -> str:
    """The report's signature line; raises VerificationRefused unless the signature is good or allowed to be absent."""
    from fwbench.release import signing

    signature = bundle_dir / "release.json.sig"
    data = (bundle_dir / "release.json").read_bytes()
    try:
        if cosign_identity is not None:
            return signing.cosign_verify_blob(bundle_dir / "release.json", bundle_dir / "release.json.cosign.bundle",
                                              cosign_identity)
        if allowed_signers is None:
            raise signing.SigningError("no --allowed-signers given to check the signature against")
        signer = signing.verify_bytes(data, signature, allowed_signers)
        return f"good signature by {signer} (allowed signers: {allowed_signers})"
    except signing.SigningError as exc:
        if not allow_unsigned:
            raise VerificationRefused(f"{exc} (pass --allow-unsigned to go on regardless)") from None
        print(f"warning: {exc}; going on (--allow-unsigned)", file=sys.stderr)
        return f"NOT VERIFIED, --allow-unsigned: {exc}"


# A re-run repeats every identity setting of a published cell (fwbench.core.axes, read from older rows as they were
# measured), so a new axis is one entry there, none here; except the ones the verifier's engine fills in (its own
# device and image variant), and the ones a re-run in the released images cannot reproduce (refused).
ENGINE_SETTINGS = tuple(axis.name for axis in axes.AXES if axis.engine_filled)
NOT_RERUNNABLE = {axis.name: axis.not_rerunnable for axis in axes.AXES if axis.not_rerunnable}
# Settings a verifier will re-run (inclusive bounds, by row column): a bundle asking for more is refused before
# anything runs. SETTING_BOUNDS' columns every published row has; SCALING_BOUNDS' may be null in older rows (each
# then reads as its axis's default).
SETTING_BOUNDS = {axis.column: axis.bounds for axis in axes.AXES if axis.bounds and axis.bounds_required}
SCALING_BOUNDS = {axis.column: axis.bounds for axis in axes.AXES if axis.bounds and not axis.bounds_required}
MAX_PUBLISHED_REPEATS = 100
MAX_RERUNS = 5_000


def check_published_settings(frame, repeats: int) -> None:
    """Every setting the re-runs would take from the (signed) rows, within sane bounds; else VerificationRefused."""
    ok = frame[frame["status"] == "ok"]
    for column, (low, high) in SETTING_BOUNDS.items():
        values = ok[column]
        if values.isna().any():
            raise VerificationRefused(f"published rows lack {column}: not a bundle verify can re-run")
        bad = values[(values < low) | (values > high)]
        if len(bad):
            raise VerificationRefused(f"published rows ask for {column} = {bad.iloc[0]}, outside {low}..{high}: "
                                      "refused before anything runs")
    for column, (low, high) in SCALING_BOUNDS.items():
        values = ok[column].dropna() if column in ok else ok["status"].iloc[:0]
        bad = values[(values < low) | (values > high)]
        if len(bad):
            raise VerificationRefused(f"published rows ask for {column} = {bad.iloc[0]}, outside {low}..{high}: "
                                      "refused before anything runs")
    try:
        for stack, task, preset, mode in ok[["stack", "task", "preset", "compile_mode"]].drop_duplicates().itertuples(
                index=False):
            registry.check_compile_mode(registry.get_stack(stack), mode)
            registry.model_file_task(task) or registry.get_task(task)
            registry.get_preset(preset)
    except registry.RegistryError as exc:
        raise VerificationRefused(f"published rows name {exc}") from None
    cells = published_cells(ok)
    for _, identity, _ in cells.values():
        for name, why in NOT_RERUNNABLE.items():
            if identity.setting(name) != FIXED_DEFAULTS[name]:
                raise VerificationRefused(f"published rows include {name} {identity.setting(name)} ({why}): verify "
                                          "cannot re-run it; refused before anything runs")
    most = max((count for _, _, count in cells.values()), default=0)
    if most > MAX_PUBLISHED_REPEATS:
        raise VerificationRefused(f"a published cell has {most} repeats, more than "
                                  f"{MAX_PUBLISHED_REPEATS}: refused before anything runs")
    if len(cells) * repeats > MAX_RERUNS:
        raise VerificationRefused(f"{len(cells)} published cells x {repeats} repeats is more than {MAX_RERUNS} "
                                  "re-runs: verify a part with --task")


def published_cells(ok) -> dict[tuple, tuple[str | None, CellIdentity, int]]:
    """The published cells of these ok rows, in a stable order: (image reference, spec_key) -> (image reference,
    the identity of the cell's rows, how many rows it has). A cell is every identity setting but ENGINE_SETTINGS."""
    cells: dict[tuple, tuple[str | None, CellIdentity, int]] = {}
    for row in ok.to_dict("records"):
        reference = row.get("image_digest")
        reference = reference if isinstance(reference, str) else None  # null (NaN through pandas)
        identity = CellIdentity.of_row(row)
        key = (reference, spec_key(identity))
        count = cells[key][2] + 1 if key in cells else 1
        cells[key] = (reference, identity, count)
    return dict(sorted(cells.items(), key=lambda item: (str(item[0][0]), str(item[0][1]))))


def published_specs(frame, tasks: list[str] | None, repeats: int | None, data_dir: Path) -> list[tuple[str, CellSpec]]:
    """(image reference, spec) per cell and repeat: the identity settings of the published ok rows."""
    ok = frame[frame["status"] == "ok"]
    if tasks:
        ok = ok[ok["task"].isin(tasks)]
    specs = []
    for reference, identity, count in published_cells(ok).values():
        settings = {attribute: identity.setting(name) for name, (_, attribute) in SETTINGS.items()
                    if name not in ENGINE_SETTINGS and attribute in SPEC_FIELDS}
        # An axis with no CellSpec field of its own travels in the spec's axis_settings (fwbench.core.axes).
        elsewhere = tuple((name, identity.setting(name)) for name, (_, attribute) in SETTINGS.items()
                          if name not in ENGINE_SETTINGS and attribute not in SPEC_FIELDS)
        base = CellSpec(stack=identity.stack, task=identity.task, preset=identity.preset,
                        compile_mode=identity.compile_mode, data_dir=str(data_dir.resolve()),
                        timeout_s=registry.get_preset(identity.preset).timeout_s, engine="docker",
                        axis_settings=elsewhere, **settings)
        for repeat in range(repeats or count):
            specs.append((reference, replace(base, repeat=repeat)))
    return specs


def with_model_files(specs: list[tuple[str, CellSpec]], models: list[Path]) -> list[tuple[str, CellSpec]]:
    """The published cells of model files (`fwbench run --model`) re-run the verifier's own copies, never a file from
    the bundle: each must be given (`--model-file FILE`) and have the SHA-256 the signed rows name; else refused before
    anything runs."""
    given: dict[str, Path] = {}
    for path in models:
        try:
            given[hashlib.sha256(path.read_bytes()).hexdigest()] = path.resolve()
        except OSError as exc:
            raise VerificationRefused(f"--model-file {path}: {exc.strerror or exc}") from None
    wanted = {spec.model_sha256: registry.model_file_task(spec.task).model for _, spec in specs if spec.model_sha256}
    for sha256, name in wanted.items():
        if sha256 not in given:
            raise VerificationRefused(
                f"the rows ran the model file {name} (SHA-256 {sha256[:12]}...), and verify never runs a file from a "
                "bundle: pass your copy with --model-file FILE (it must have that SHA-256), or leave its cells out "
                "with --task")
    unused = [str(path) for sha256, path in given.items() if sha256 not in wanted]
    if unused:
        raise VerificationRefused(f"--model-file {unused[0]}: no published row to verify ran this file (its SHA-256 "
                                  "differs from every row's)")
    return [(reference, replace(spec, model_file=str(given[spec.model_sha256])) if spec.model_sha256 else spec)
            for reference, spec in specs]


MARKER = "verification.json"  # ties a verification folder to one bundle (by its SHA-256)


def claim_out_folder(out: Path, bundle_sha256: str) -> None:
    """--out is this bundle's verification folder: new or empty, or one an earlier run of this same bundle left
    (resumed). Anything else is refused, so rows of another verification can never be counted."""
    import json

    marker = out / MARKER
    if out.exists() and not out.is_dir():
        raise VerificationRefused(f"--out {out} is not a folder")
    if out.is_dir() and any(out.iterdir()):
        try:
            earlier = json.loads(marker.read_text()).get("bundle_sha256")
        except (OSError, ValueError, AttributeError, RecursionError):
            earlier = None
        if earlier != bundle_sha256:
            what = "a verification of another bundle" if earlier else "files that are not a verification of this bundle"
            raise VerificationRefused(f"--out {out} already holds {what}; choose a new or empty folder (rows of "
                                      "another verification are never counted)")
        return
    out.mkdir(parents=True, exist_ok=True)
    write_atomically(marker, json.dumps({"bundle_sha256": bundle_sha256}) + "\n")


def spec_key(identity) -> tuple:
    """A cell's key for matching published specs to verified cells: the identity without the device and the image
    variant (the engine fills both in at run time: ENGINE_SETTINGS)."""
    return (identity.stack, identity.task, identity.preset, identity.compile_mode,
            *(value for name, value in identity.settings if name not in ENGINE_SETTINGS))


def rerun(specs: list[tuple[str, CellSpec]], results_dir: Path, engine_for) -> None:
    """Run (resume) these (image reference, spec) re-runs: one engine per pin set, engine_for(pin_set, images)."""
    from fwbench.engines import matrix
    from fwbench.engines import slots as slot_plan

    by_pin_set: dict[str, list[CellSpec]] = {}
    references: dict[str, dict[str, str]] = {}
    for reference, spec in specs:
        by_pin_set.setdefault(spec.pin_set, []).append(spec)
        references.setdefault(spec.pin_set, {})[spec.stack] = str(reference)
    for pin_set, group in by_pin_set.items():
        engine = engine_for(pin_set, references[pin_set])
        matrix.ensure_data(group)
        for stack in dict.fromkeys(s.stack for s in group):
            engine.prepare(stack)
        slots = slot_plan.one_cell_at_a_time(engine.device, max(s.devices for s in group))
        for result in matrix.run_matrix(group, results_dir, engine, resume=True, slots=slots):
            row = result.row or {}
            print(f"{row.get('status', '?'):>11} {result.spec.stack} {result.spec.task} r{result.spec.repeat}: "
                  f"{_ms(row.get('ms_per_step'))} ms/step", file=sys.stderr)


def rerun_and_judge(published, specs: list[tuple[str, CellSpec]], results_dir: Path, engine_for, references: set[str],
                    *, tolerance: float, fail_above: float | None, allow_inconclusive: bool, repeats: int | None,
                    max_repeats: int | None, max_added_s: float | None) -> tuple[list, int]:
    """The first re-runs, then added repeats for inconclusive cells (module doc). (cells, looks per cell)."""
    from fwbench_aggregator import loading, verification

    rerun(specs, results_dir, engine_for)
    schedule = verification.look_schedule(repeats, max_repeats) if repeats and max_repeats else [repeats or 0]
    base = {spec_key(spec.identity): (reference, spec) for reference, spec in specs if spec.repeat == 0}

    def judge():
        again = _only_released(loading.load_results([results_dir]), references)
        return verification.verify(published, again, tolerance, fail_above, allow_inconclusive, looks=len(schedule),
                                   max_rerun_repeats=schedule[-1])

    started = time.perf_counter()

    def add(wanted: dict) -> None:
        more = []
        for key, count in wanted.items():
            if key in base:
                reference, spec = base[key]
                more += [(reference, replace(spec, repeat=r)) for r in range(count)]
        print(f"verify: {len(wanted)} inconclusive cell(s): re-running up to {max(wanted.values())} repeats a cell",
              file=sys.stderr)
        rerun(more, results_dir, engine_for)

    def time_left() -> bool:
        left = max_added_s is None or time.perf_counter() - started < max_added_s
        if not left:
            print(f"verify: no more added repeats: they took {time.perf_counter() - started:.0f} s "
                  "(--max-added-minutes)", file=sys.stderr)
        return left

    cells = verification.with_added_repeats(judge, add, schedule, key=lambda c: spec_key(c.identity),
                                            time_left=time_left)
    return cells, len(schedule)


def run_verify(bundle: Path, out: Path, allowed_signers: Path | None, allow_unsigned: bool, tasks: list[str] | None,
               *, repeats: int | None, fail_above: float | None, tolerance: float, device: str,
               cosign_key: Path | None = None, cosign_identity: str | None = None, allow_inconclusive: bool = False,
               max_repeats: int | None = None, max_added_minutes: float | None = None,
               models: list[Path] | None = None) -> int:
    """Exit code: 0 only when every verified cell is reproduced (inconclusive ones too with allow_inconclusive)."""
    from fwbench.release import images, signing
    from fwbench.engines.docker import DockerEngine
    from fwbench_aggregator import compare, loading, verification

    from fwbench_aggregator.errors import AggregateError

    started = time.perf_counter()
    if not bundle.is_file():
        raise VerificationRefused(f"no bundle at {bundle}")
    claim_out_folder(out, bundle_digest(bundle))
    bundle_dir, bundle_signature_line = open_bundle(bundle, out / "bundle", allowed_signers, allow_unsigned)
    signature_line = check_signature(bundle_dir, allowed_signers, allow_unsigned, cosign_identity)
    release = read_release(bundle_dir / "release.json")
    try:
        published = loading.load_results([bundle_dir / "report" / "merged.parquet"])
    except AggregateError as exc:
        raise VerificationRefused(f"the bundle's rows are not readable: {' '.join(str(exc).split())}") from None
    check_published_settings(published.frame(), max(repeats or 1, max_repeats or 1))
    specs = with_model_files(published_specs(published.frame(), tasks, repeats, out / "data"), models or [])
    _warn_about_short_published_cells(published.frame(), tasks)
    if not specs:
        raise VerificationRefused("the bundle has no ok rows" + (f" for {', '.join(tasks)}" if tasks else ""))
    needed = {}
    for reference, _spec in specs:
        released = release.by_reference(str(reference))
        if released is None:
            raise VerificationRefused(f"rows name {reference}, which the release does not list")
        needed[reference] = released
    # Every image is checked before anything runs: a refusal re-runs nothing.
    client = images.docker_client()
    for released in needed.values():
        print(f"checking {released.reference}", file=sys.stderr)
        images.check_image(client, released)
        if cosign_key is not None:
            if not signing.cosign_available():
                raise VerificationRefused("--cosign-key given but cosign is not on PATH")
            signing.cosign_verify_image(released.reference, cosign_key)
    checks_s = time.perf_counter() - started
    results_dir = out / "results"
    cells, looks = rerun_and_judge(
        published, specs, results_dir, lambda pin_set, refs: DockerEngine(device=device, pin_set=pin_set, images=refs),
        set(needed), tolerance=tolerance, fail_above=fail_above, allow_inconclusive=allow_inconclusive, repeats=repeats, max_repeats=max_repeats,
        max_added_s=None if max_added_minutes is None else max_added_minutes * 60)
    reruns_s = time.perf_counter() - started - checks_s
    facts = [("bundle", str(bundle)), ("release", f"{release.git_revision} ({len(release.images)} image(s), "
                                                  f"registry {release.registry})"),
             ("release signature", signature_line),
             ("rows signature", bundle_signature_line + " (bundle.json: the rows, their settings and the report)"),
             ("images checked", f"{len(needed)}: pulled by digest, tag, id, labels, lock and SBOM hashes as released"),
             ("tolerance", f"±{tolerance:g}%" + (f", fail above +{fail_above:g}%" if fail_above is not None else "")
              + f"; reproduced = the {verification.Rule(looks=looks).tost_confidence * 100:.3g}% interval (TOST) inside "
              f"it, with {compare.MIN_REPEATS}+ repeats a side; slower/faster family-wise (alpha 0.05 over the cells "
              f"and {looks} look(s))"
              + ("; inconclusive allowed (--allow-inconclusive)" if allow_inconclusive else "")),
             ("added repeats", f"inconclusive cells re-run up to {max_repeats or repeats} repeats "
                               f"(looks at {', '.join(map(str, verification.look_schedule(repeats, max_repeats)))} "
                               "repeats)" if repeats and max_repeats and max_repeats > repeats else "none")]
    report = verification.write_report(cells, out / "report", facts)
    report_s = time.perf_counter() - started - checks_s - reruns_s
    print(report.read_text())
    # Stable, parseable line (benchmarks/verify_overhead.py): everything but the re-runs is overhead.
    print(f"timing: checks_s={checks_s:.2f} reruns_s={reruns_s:.2f} compare_report_s={report_s:.2f}", file=sys.stderr)
    print(f"verification report: {report} (also verification.html, verification.parquet)", file=sys.stderr)
    code, lines = verification.outcome(cells)
    for line in lines:
        print(line, file=sys.stderr)
    return code


def _warn_about_short_published_cells(frame, tasks: list[str] | None) -> None:
    """Say up front when published cells have too few repeats for any verdict (they will be inconclusive)."""
    from fwbench_aggregator.compare import MIN_REPEATS

    ok = frame[frame["status"] == "ok"]
    if tasks:
        ok = ok[ok["task"].isin(tasks)]
    short = [count for _, _, count in published_cells(ok).values() if count < MIN_REPEATS]
    if short:
        print(f"warning: {len(short)} published cell(s) have fewer than {MIN_REPEATS} repeats (as few as "
              f"{min(short)}); a verdict needs {MIN_REPEATS} a side, so they will be inconclusive", file=sys.stderr)


def _only_released(loaded, references: set[str]):
    """Re-run rows from exactly this bundle's images (a folder of this bundle only, but a row is never trusted
    for where it sits)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keep = pc.is_in(loaded.table.column("image_digest"), value_set=pa.array(sorted(references), type=pa.string()))
    return replace(loaded, table=loaded.table.filter(pc.fill_null(keep, False)))


def _ms(value) -> str:
    return "—" if value is None else f"{value:.4g}"
