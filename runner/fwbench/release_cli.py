"""`fwbench publish`, `fwbench bundle` and `fwbench verify`: the third-party verification path (README
"Verify published results").

publish: push built images, record them by digest (release.json + release.env + SBOMs), sign release.json.
bundle:  results + their release (+ signature) + the report, in one file to hand over.
verify:  check the signature, pull each image by digest and check it against the release, re-run the published
         cells in exactly those images, compare, report; non-zero exit when a cell does not reproduce.
Nothing is re-run until every check has passed.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import List, Optional

import typer

from fwbench import __version__, registry
from fwbench.atomic import write_atomically
from fwbench.release import Release, ReleaseError, compose_env, read_release
from fwbench.signing import SigningError

BUNDLE_RESULTS = "merged.parquet"
BUNDLE_FILES = ("release.json", "release.json.sig", "release.json.cosign.bundle")


class VerificationRefused(Exception):
    """A check failed before anything was re-run: one line, exit 1."""


def _fail(message: str, code: int = 1) -> typer.Exit:
    print(f"error: {message}", file=sys.stderr)
    return typer.Exit(code)


def git_revision() -> str:
    if os.environ.get("FWBENCH_GIT_REVISION"):
        return os.environ["FWBENCH_GIT_REVISION"]
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def publish(registry_host: str, pin_set: str, variant: str, stacks: list[str], out: Path, sign_key: Path | None,
            cosign_key: Path | None, image_template: str, pushed: bool = False) -> Release:
    """pushed: the images are already on the registry (CI's Buildx pushed them): record them by the digest their
    tag resolves to, reading their facts from a pull by that digest."""
    from fwbench import images, signing

    client = images.docker_client()
    registry_host = registry_host.rstrip("/")
    release_path = out / "release.json"
    release = Release(registry_host, __version__, git_revision(),
                      datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    if release_path.is_file():  # publishing another variant or pin set into the same release
        earlier = read_release(release_path)
        if earlier.registry == registry_host:
            release.images = list(earlier.images)
    local_names = {s: image_template.format(stack=s, pin_set=pin_set, variant=variant) for s in stacks}
    if pushed:
        local_names = {s: _pull_pushed(client, f"{registry_host}/fwbench/{s}", f"{pin_set}-{variant}") for s in stacks}
    missing = [name for name in local_names.values() if not _image_exists(client, name)]
    if missing:
        raise ReleaseError(f"not built: {', '.join(missing)} (docker compose build, see README)")
    (out / "sboms").mkdir(parents=True, exist_ok=True)
    for stack, local_name in local_names.items():
        repository, tag = f"{registry_host}/fwbench/{stack}", f"{pin_set}-{variant}"
        if pushed:
            digest = local_name.rsplit("@", 1)[1]
        else:
            print(f"pushing {local_name} -> {repository}:{tag}", file=sys.stderr)
            digest = images.push(client, local_name, repository, tag)
        entry, sbom = images.release_entry(client, local_name, repository, tag, digest)
        if (entry.stack, entry.pin_set, entry.variant) != (stack, pin_set, variant):
            raise ReleaseError(f"{local_name} is labelled {entry.stack} {entry.pin_set}-{entry.variant}")
        write_atomically(out / "sboms" / f"{stack}-{tag}.cdx.json", sbom)
        if signing.cosign_available():
            signing.cosign_sign_image(entry.reference, cosign_key)
        release.images = [i for i in release.images if i.key != entry.key] + [entry]
        print(f"  {entry.reference}", file=sys.stderr)
    write_atomically(release_path, release.to_json())
    write_atomically(out / "release.env", compose_env(release, pin_set, variant))
    if sign_key:
        signing.sign_file(release_path, sign_key)
    else:
        Path(str(release_path) + ".sig").unlink(missing_ok=True)  # a stale signature would not match
        print("warning: release.json is not signed (--sign-key): verifiers must pass --allow-unsigned",
              file=sys.stderr)
    return release


def _pull_pushed(client, repository: str, tag: str) -> str:
    from fwbench import images

    import docker

    reference = f"{repository}@{images.registry_digest(client, f'{repository}:{tag}')}"
    try:
        client.images.pull(reference)
    except docker.errors.APIError as exc:
        raise ReleaseError(f"cannot pull {reference}: {exc.explanation or exc}") from None
    return reference


def _image_exists(client, name: str) -> bool:
    import docker

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


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


def register(app: typer.Typer) -> None:
    @app.command("publish")
    def publish_cmd(
        registry_host: str = typer.Option(..., "--registry", help="Registry host[:port], e.g. ghcr.io/OWNER or 127.0.0.1:5000."),
        pin_set: Optional[str] = typer.Option(None, "--pin-set", envvar="FWBENCH_PIN_SET", help="current (default) or paper-2024."),
        variant: str = typer.Option("gpu", help="Image variant: cpu or gpu."),
        stack: Optional[List[str]] = typer.Option(None, "--stack", help="Stacks (repeatable; default: all five)."),
        out: Path = typer.Option(Path("release"), "--out", help="Where release.json, release.env and sboms/ go."),
        sign_key: Optional[Path] = typer.Option(None, "--sign-key", help="SSH private key that signs release.json."),
        cosign_key: Optional[Path] = typer.Option(None, "--cosign-key", help="cosign key (when cosign is on PATH; "
                                                  "without it cosign signs keyless)."),
        image: str = typer.Option("fwbench/{stack}:{pin_set}-{variant}", help="Local image name template."),
        pushed: bool = typer.Option(False, "--pushed", help="The images are already on the registry as "
                                    "fwbench/<stack>:<pin-set>-<variant> (e.g. pushed by Buildx): record, don't push."),
    ) -> None:
        """Push built images, write release.json (images by digest, lock/SBOM/base digests) and release.env, sign."""
        from fwbench.cli import pin_set_or_default

        if variant not in ("cpu", "gpu"):
            raise _fail(f"--variant must be cpu or gpu, not {variant!r}", 2)
        pin_set = pin_set_or_default(pin_set)
        stacks = [registry.get_stack(s).id for s in (stack or registry.STACKS)]
        if sign_key is not None and not sign_key.is_file():
            raise _fail(f"no signing key at {sign_key}", 2)
        try:
            release = publish(registry_host, pin_set, variant, stacks, out, sign_key, cosign_key, image, pushed)
        except (ReleaseError, SigningError) as exc:
            raise _fail(str(exc)) from None
        print(f"release: {out / 'release.json'} ({len(release.images)} image(s)); "
              f"compose: docker compose --env-file {out / 'release.env'} pull / up --no-build SERVICE")

    @app.command("bundle")
    def bundle_cmd(
        results: List[Path] = typer.Argument(..., help="Results directories of a run made with --release."),
        release_path: Path = typer.Option(Path("release/release.json"), "--release", help="The release the rows ran in."),
        output: Path = typer.Option(..., "-o", "--output", help="Bundle file to write (.tar.gz)."),
    ) -> None:
        """Pack results, their release (and signature) and the report for a third party to verify."""
        from fwbench_aggregator.errors import AggregateError

        try:
            make_bundle(list(results), release_path, output)
        except (ReleaseError, AggregateError) as exc:
            raise _fail(str(exc), getattr(exc, "exit_code", 1)) from None
        print(f"bundle: {output}")

    @app.command("verify")
    def verify_cmd(
        bundle: Path = typer.Argument(..., help="A bundle made by `fwbench bundle`."),
        allowed_signers: Optional[Path] = typer.Option(None, "--allowed-signers", help="The publisher's SSH "
                                                       "allowed-signers file (obtained from them, not the bundle)."),
        allow_unsigned: bool = typer.Option(False, "--allow-unsigned", help="Go on without a valid signature (said in "
                                                                            "the report)."),
        task: Optional[List[str]] = typer.Option(None, "--task", help="Only these tasks (repeatable)."),
        repeats: int = typer.Option(5, help="Re-runs per cell; a verdict needs 3 a side (published and re-run)."),
        fail_above: Optional[float] = typer.Option(None, "--fail-above", help="Exit 1 if a cell is slower than "
                                                   "published by more than PCT percent (its whole 90% interval)."),
        tolerance: float = typer.Option(10.0, help="Percent within which a cell counts as reproduced (its whole 90% "
                                                   "interval of re-run/published)."),
        allow_inconclusive: bool = typer.Option(False, "--allow-inconclusive", help="Exit 0 despite inconclusive "
                                                "cells (still reported); slower, faster and failed cells still fail."),
        out: Optional[Path] = typer.Option(None, "--out", help="Working and report directory (default verify-<bundle>)."),
        gpus: str = typer.Option("auto", help="Request GPUs for the re-runs: auto, all, none."),
        cosign_key: Optional[Path] = typer.Option(None, "--cosign-key", help="Also check cosign signatures of the images "
                                                  "with this public key (needs cosign on PATH)."),
        cosign_identity: Optional[str] = typer.Option(None, "--cosign-identity", help="Check the release's keyless "
                                                      "cosign signature instead of an SSH one: a regexp of the signing "
                                                      "workflow, e.g. '^https://github.com/OWNER/fwbench/'."),
    ) -> None:
        """Check a published bundle's signature and images, re-run its cells in those images, compare, report."""
        from fwbench.verify import run_verify
        from fwbench_aggregator.compare import MIN_REPEATS as MIN_VERDICT_REPEATS

        if repeats < MIN_VERDICT_REPEATS:
            raise _fail(f"--repeats must be at least {MIN_VERDICT_REPEATS}: a verdict needs {MIN_VERDICT_REPEATS} "
                        "repeats a side", 2)
        if not 0 < tolerance < 100:
            raise _fail("--tolerance must be between 0 and 100 (percent)", 2)
        for task_id in task or []:
            registry.get_task(task_id)
        out = out or Path(f"verify-{bundle.name.split('.')[0]}")
        try:
            code = run_verify(bundle, out, allowed_signers, allow_unsigned, task or None, repeats, fail_above,
                              tolerance, gpus, cosign_key, cosign_identity, allow_inconclusive)
        except (VerificationRefused, ReleaseError, SigningError) as exc:
            raise _fail(f"verification refused: {exc}") from None
        if code:
            raise typer.Exit(code)

