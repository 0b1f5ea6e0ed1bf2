"""Bundles: results + their release (+ signature) + the report in one file to hand over, and opening one on
the verifier's side.

A bundle is a .tar.gz with a manifest, bundle.json: the SHA-256 and size of every other member (the rows in
report/merged.parquet, release.json and its signatures, the report). The publisher signs the manifest
(bundle.json.sig, SSH namespace `fwbench-bundle`), so the signature covers the rows and every setting on them,
not only the images. The verifier never unpacks a bundle blindly (never `extractall`, whatever tarfile's filters
promise): it reads the manifest and its signature first, checks the signature, then copies out only the
members the manifest names, by exact name, as regular files, within size caps, each checked against its
digest before anything uses it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tarfile
import tempfile
from pathlib import Path

from fwbench.core.atomic import write_atomically
from fwbench.release.record import ReleaseError, read_release

BUNDLE_FORMAT_VERSION = 2
MANIFEST, MANIFEST_SIGNATURE = "bundle.json", "bundle.json.sig"
BUNDLE_RESULTS = "merged.parquet"
RELEASE_FILES = ("release.json", "release.json.sig", "release.json.cosign.bundle")
# Member names a bundle may hold: the release files and the report's files (one folder level at most).
MEMBER_NAME = re.compile(r"^(release\.json(\.sig|\.cosign\.bundle)?|report/([A-Za-z0-9][A-Za-z0-9._-]{0,99}/)?"
                         r"[A-Za-z0-9][A-Za-z0-9._-]{0,99})$")
# Caps: what a bundle of even a large matrix needs, far below what would fill a disk.
MAX_MEMBER_BYTES = 64 * 2**20
MAX_TOTAL_BYTES = 256 * 2**20
MAX_MANIFEST_BYTES = 2**20
MAX_MEMBERS = 1000


class VerificationRefused(Exception):
    """A check failed before anything was re-run: one line, exit 1."""


def make_bundle(result_dirs: list[Path], release_path: Path, output: Path, sign_key: Path | None = None) -> Path:
    """merged rows + release.json (+ .sig) + the report + the manifest (signed with sign_key), as one .tar.gz.
    Every ok row must have run in an image of the release (by digest), or there is nothing to verify it against."""
    from fwbench.release import signing
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
        members = {name: release_path.with_name(name) for name in RELEASE_FILES if release_path.with_name(name).is_file()}
        members.update({f"report/{p.relative_to(report_dir).as_posix()}": p
                        for p in sorted(report_dir.rglob("*")) if p.is_file()})
        bad = [name for name in members if not MEMBER_NAME.match(name)]
        if bad:
            raise ReleaseError(f"cannot bundle a file named {bad[0]!r} (names: letters, digits, '.', '_', '-')")
        manifest = Path(work) / MANIFEST
        manifest.write_text(json.dumps(
            {"format": "fwbench-bundle", "format_version": BUNDLE_FORMAT_VERSION,
             "members": {name: {"sha256": _sha256_file(path), "size": path.stat().st_size}
                         for name, path in members.items()}}, indent=1, sort_keys=True) + "\n")
        if sign_key is not None:
            signing.sign_file(manifest, sign_key, signing.BUNDLE_NAMESPACE)
        output.parent.mkdir(parents=True, exist_ok=True)
        tmp = output.with_name(f".{output.name}.tmp")
        with tarfile.open(tmp, "w:gz") as archive:
            for name in (MANIFEST, MANIFEST_SIGNATURE):
                if (Path(work) / name).is_file():
                    archive.add(Path(work) / name, arcname=name, recursive=False)
            for name, path in members.items():
                archive.add(path, arcname=name, recursive=False)
        tmp.replace(output)
    return output


def bundle_digest(bundle: Path) -> str:
    """SHA-256 of the bundle file: what a verification folder is tied to."""
    return _sha256_file(bundle)


def open_bundle(bundle: Path, into: Path, allowed_signers: Path | None, allow_unsigned: bool) -> tuple[Path, str]:
    """Check the manifest's signature, then copy the members it lists into `into` (made afresh), each checked.
    Returns (into, the report's signature line)."""
    if not bundle.is_file():
        raise VerificationRefused(f"no bundle at {bundle}")
    try:
        with tarfile.open(bundle, "r:gz") as archive:
            manifest_bytes, signature_bytes = _read_manifest(archive, bundle)
            manifest = _parse_manifest(manifest_bytes, bundle)
            signature_line = _check_manifest_signature(manifest_bytes, signature_bytes, allowed_signers, allow_unsigned)
            _fresh_folder(into)
            _copy_listed_members(archive, manifest, into, bundle)
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
        raise VerificationRefused(f"{bundle} is not a readable fwbench bundle: {' '.join(str(exc).split())}") from None
    for needed in ("release.json", f"report/{BUNDLE_RESULTS}"):
        if not (into / needed).is_file():
            raise VerificationRefused(f"{bundle} has no {needed} (make it with `fwbench bundle`)")
    return into, signature_line


def _read_manifest(archive: tarfile.TarFile, bundle: Path) -> tuple[bytes, bytes | None]:
    """The manifest and its signature, read into memory (capped) before anything else leaves the archive."""
    found: dict[str, bytes] = {}
    for count, member in enumerate(archive, start=1):
        if count > MAX_MEMBERS:
            raise VerificationRefused(f"{bundle} has more than {MAX_MEMBERS} members")
        if member.name in (MANIFEST, MANIFEST_SIGNATURE):
            if member.name in found:
                raise VerificationRefused(f"{bundle} holds {member.name} twice")
            if not member.isreg() or member.size > MAX_MANIFEST_BYTES:
                raise VerificationRefused(f"{bundle}: {member.name} is not a regular file of at most "
                                          f"{MAX_MANIFEST_BYTES} bytes")
            found[member.name] = archive.extractfile(member).read(MAX_MANIFEST_BYTES + 1)
    if MANIFEST not in found:
        raise VerificationRefused(f"{bundle} has no {MANIFEST}: made by an older fwbench, or not a bundle "
                                  "(make it with `fwbench bundle --sign-key KEY`)")
    return found[MANIFEST], found.get(MANIFEST_SIGNATURE)


def _parse_manifest(data: bytes, bundle: Path) -> dict[str, dict]:
    try:
        manifest = json.loads(data)
        members = manifest["members"]
        if manifest.get("format") != "fwbench-bundle" or manifest.get("format_version") != BUNDLE_FORMAT_VERSION:
            raise VerificationRefused(f"{bundle}: bundle format {manifest.get('format_version')!r} is not "
                                      f"{BUNDLE_FORMAT_VERSION} (made by another fwbench version)")
        for name, entry in members.items():
            if not (MEMBER_NAME.match(name) and re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
                    and isinstance(entry["size"], int) and 0 <= entry["size"] <= MAX_MEMBER_BYTES):
                raise VerificationRefused(f"{bundle}: {MANIFEST} lists a member it may not hold: {name[:80]!r}")
        if sum(entry["size"] for entry in members.values()) > MAX_TOTAL_BYTES:
            raise VerificationRefused(f"{bundle}: its members add up to more than {MAX_TOTAL_BYTES} bytes")
        return members
    except VerificationRefused:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        raise VerificationRefused(f"{bundle}: {MANIFEST} is not an fwbench bundle manifest "
                                  f"({exc.__class__.__name__})") from None


def _check_manifest_signature(manifest: bytes, signature: bytes | None, allowed_signers: Path | None,
                              allow_unsigned: bool) -> str:
    from fwbench.release import signing

    try:
        if allowed_signers is None:
            raise signing.SigningError("no --allowed-signers given to check the bundle's signature against")
        with tempfile.TemporaryDirectory(prefix="fwbench-manifest-") as work:
            signature_path = Path(work) / MANIFEST_SIGNATURE
            if signature is not None:
                signature_path.write_bytes(signature)
            signer = signing.verify_bytes(manifest, signature_path, allowed_signers, signing.BUNDLE_NAMESPACE,
                                          what="bundle")
        return f"good signature by {signer} (allowed signers: {allowed_signers})"
    except signing.SigningError as exc:
        if not allow_unsigned:
            raise VerificationRefused(f"{exc} (pass --allow-unsigned to go on regardless)") from None
        return f"NOT VERIFIED, --allow-unsigned: {exc}"


def _fresh_folder(into: Path) -> None:
    """`into` is ours (the verification folder's bundle/): what an earlier run left there is replaced."""
    if into.is_symlink() or into.is_file():
        into.unlink()
    elif into.is_dir():
        shutil.rmtree(into)
    into.mkdir(parents=True)


def _copy_listed_members(archive: tarfile.TarFile, manifest: dict[str, dict], into: Path, bundle: Path) -> None:
    seen: set[str] = set()
    for member in archive:
        name = member.name
        if name in (MANIFEST, MANIFEST_SIGNATURE):
            continue
        if name not in manifest:
            raise VerificationRefused(f"{bundle} holds a member its manifest does not list: {name[:80]!r}")
        if name in seen:
            raise VerificationRefused(f"{bundle} holds {name} twice")
        seen.add(name)
        expected = manifest[name]
        if not member.isreg():
            raise VerificationRefused(f"{bundle}: {name} is not a regular file (links and devices are refused)")
        if member.size != expected["size"]:
            raise VerificationRefused(f"{bundle}: {name} does not match the manifest ({member.size} bytes, listed "
                                      f"as {expected['size']}): changed after the bundle was made")
        data = archive.extractfile(member).read(MAX_MEMBER_BYTES + 1)
        if len(data) != expected["size"] or hashlib.sha256(data).hexdigest() != expected["sha256"]:
            raise VerificationRefused(f"{bundle}: {name} does not match its digest in the manifest (changed after "
                                      "the bundle was made)")
        target = into.joinpath(*name.split("/"))  # the name matched MEMBER_NAME: no '..', no absolute path
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, data)
    missing = sorted(set(manifest) - seen)
    if missing:
        raise VerificationRefused(f"{bundle} lacks {missing[0]}, which its manifest lists")


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(2**20), b""):
            digest.update(chunk)
    return digest.hexdigest()
