"""`fwbench publish`, `fwbench bundle` and `fwbench verify`: the third-party verification path
(docs/verification.md).

publish: push built images, record them by digest (release.json + release.env + SBOMs), sign release.json.
bundle:  results + their release (+ signature) + the report, in one file to hand over.
verify:  check the signature, pull each image by digest and check it against the release, re-run the published
         cells in exactly those images, compare, report; non-zero exit when a cell does not reproduce.
Nothing is re-run until every check has passed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from fwbench.core import registry
from fwbench.cli.options import MatrixOptions, Override, matrix_options
from fwbench.release.bundle import VerificationRefused, make_bundle
from fwbench.release.publish import publish
from fwbench.release.record import ReleaseError
from fwbench.release.signing import SigningError


def _fail(message: str, code: int = 1) -> typer.Exit:
    print(f"error: {message}", file=sys.stderr)
    return typer.Exit(code)


def register(app: typer.Typer) -> None:
    @app.command("publish")
    def publish_cmd(
        registry_host: str = typer.Option(..., "--registry", help="Registry host[:port], e.g. ghcr.io/OWNER or 127.0.0.1:5000."),
        pin_set: Optional[str] = typer.Option(None, "--pin-set", envvar="FWBENCH_PIN_SET", help="current (default) or paper-2024."),
        variant: str = typer.Option("gpu", help="Image variant: cpu or gpu."),
        stack: Optional[List[str]] = typer.Option(None, "--stack", help="Stacks (repeatable; default: all five)."),
        out: Path = typer.Option(Path("release"), "--out", "-o", help="Where release.json, release.env and sboms/ go."),
        sign_key: Optional[Path] = typer.Option(None, "--sign-key", help="SSH private key that signs release.json."),
        cosign_key: Optional[Path] = typer.Option(None, "--cosign-key", help="cosign key (when cosign is on PATH; "
                                                  "without it cosign signs keyless)."),
        image: str = typer.Option(registry.IMAGE_TEMPLATE, help="Local image name template."),
        pushed: bool = typer.Option(False, "--pushed", help="The images are already on the registry as "
                                    "fwbench/<stack>:<pin-set>-<variant> (e.g. pushed by Buildx): record, don't push."),
    ) -> None:
        """Push built images, write release.json (images by digest, lock/SBOM/base digests) and release.env, sign."""
        from fwbench.cli.common import pin_set_or_default

        if variant not in ("cpu", "gpu"):
            raise _fail(f"--variant must be cpu or gpu, not {variant!r}", 2)
        pin_set = pin_set_or_default(pin_set)
        stacks = [registry.get_stack(s).id for s in (stack or registry.STACKS)]
        if sign_key is not None and not sign_key.is_file():
            raise _fail(f"no signing key at {sign_key}", 2)
        try:
            release = publish(registry_host, pin_set, variant, stacks, out, sign_key=sign_key, cosign_key=cosign_key, image_template=image, pushed=pushed)
        except (ReleaseError, SigningError) as exc:
            raise _fail(str(exc)) from None
        print(f"release: {out / 'release.json'} ({len(release.images)} image(s)); "
              f"compose: docker compose --env-file {out / 'release.env'} pull / up --no-build SERVICE")

    @app.command("bundle")
    def bundle_cmd(
        results: List[Path] = typer.Argument(..., help="Results directories of a run made with --release."),
        release_path: Path = typer.Option(Path("release/release.json"), "--release", help="The release the rows ran in."),
        output: Path = typer.Option(..., "--out", "-o", "--output", help="Bundle file to write (.tar.gz)."),
        sign_key: Optional[Path] = typer.Option(None, "--sign-key", help="SSH private key that signs the bundle's "
                                                "manifest (the rows and their settings); verify refuses an unsigned "
                                                "bundle unless --allow-unsigned."),
    ) -> None:
        """Pack results, their release (and signature) and the report for a third party to verify."""
        from fwbench_aggregator.errors import AggregateError

        if sign_key is not None and not sign_key.is_file():
            raise _fail(f"no signing key at {sign_key}", 2)
        try:
            make_bundle(list(results), release_path, output, sign_key)
        except (ReleaseError, AggregateError, SigningError) as exc:
            raise _fail(str(exc), getattr(exc, "exit_code", 1)) from None
        print(f"bundle: {output}")

    @app.command("verify")
    @matrix_options(only=("task", "repeats", "device"), task=Override(default_text="every published task"),
                    repeats=Override(default=5, help="Re-runs per cell; a verdict needs 3 a side (published and "
                                                     "re-run)."))
    def verify_cmd(
        options: MatrixOptions,
        bundle: Path = typer.Argument(..., help="A bundle made by `fwbench bundle`."),
        allowed_signers: Optional[Path] = typer.Option(None, "--allowed-signers", help="The publisher's SSH "
                                                       "allowed-signers file (obtained from them, not the bundle)."),
        allow_unsigned: bool = typer.Option(False, "--allow-unsigned", help="Go on without a valid signature (said in "
                                                                            "the report)."),
        max_repeats: Optional[int] = typer.Option(None, "--max-repeats", help="Re-runs an inconclusive cell may get: "
                                                  "batches of --repeats more, judged after each at levels adjusted "
                                                  "for the looks; none for a cell the cap cannot decide (default: "
                                                  "15, or --repeats if more; --max-repeats N = --repeats: one look, "
                                                  "none added)."),
        max_added_minutes: float = typer.Option(120.0, "--max-added-minutes", help="No batch of added re-runs "
                                                "starts once they have taken this long."),
        fail_above: Optional[float] = typer.Option(None, "--fail-above", help="Exit 1 if a cell is slower than "
                                                   "published by more than PCT percent (its whole 90% interval)."),
        tolerance: float = typer.Option(10.0, help="Percent within which a cell counts as reproduced (its whole 90% "
                                                   "interval of re-run/published)."),
        allow_inconclusive: bool = typer.Option(False, "--allow-inconclusive", help="Exit 0 despite inconclusive "
                                                "cells (still reported); slower, faster and failed cells still fail."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="Working and report directory (default verify-<bundle>)."),
        cosign_key: Optional[Path] = typer.Option(None, "--cosign-key", help="Also check cosign signatures of the images "
                                                  "with this public key (needs cosign on PATH)."),
        cosign_identity: Optional[str] = typer.Option(None, "--cosign-identity", help="Check the release's keyless "
                                                      "cosign signature instead of an SSH one: a regexp of the signing "
                                                      "workflow, e.g. '^https://github.com/OWNER/fwbench/'."),
        model_file: Optional[List[Path]] = typer.Option(None, "--model-file", help="Your copy of a model file the "
                                                        "rows ran (`run --model`; repeatable): it must have the SHA-256 "
                                                        "they name; verify never runs a file from the bundle."),
    ) -> None:
        """Check a published bundle's signature and images, re-run its cells in those images, compare, report."""
        from fwbench.release.verify import run_verify
        from fwbench_aggregator.compare import MIN_REPEATS as MIN_VERDICT_REPEATS
        from fwbench_aggregator.verification import DEFAULT_MAX_REPEATS

        if options.repeats < MIN_VERDICT_REPEATS:
            raise _fail(f"--repeats must be at least {MIN_VERDICT_REPEATS}: a verdict needs {MIN_VERDICT_REPEATS} "
                        "repeats a side", 2)
        max_repeats = max(DEFAULT_MAX_REPEATS, options.repeats) if max_repeats is None else max_repeats
        if options.repeats > 100 or max_repeats > 100:
            raise _fail("--repeats and --max-repeats must be at most 100", 2)
        if max_repeats < options.repeats:
            raise _fail(f"--max-repeats ({max_repeats}) must be at least --repeats ({options.repeats})", 2)
        if max_added_minutes < 0:
            raise _fail("--max-added-minutes must be >= 0", 2)
        if not 0 < tolerance < 100:
            raise _fail("--tolerance must be between 0 and 100 (percent)", 2)
        out = out or Path(f"verify-{bundle.name.split('.')[0]}")
        try:
            code = run_verify(bundle, out, allowed_signers, allow_unsigned, options.task or None,
                              repeats=options.repeats, fail_above=fail_above, tolerance=tolerance, device=options.device,
                              cosign_key=cosign_key, cosign_identity=cosign_identity,
                              allow_inconclusive=allow_inconclusive, max_repeats=max_repeats,
                              max_added_minutes=max_added_minutes, models=model_file or [])
        except (VerificationRefused, ReleaseError, SigningError) as exc:
            raise _fail(f"verification refused: {exc}") from None
        if code:
            raise typer.Exit(code)
