"""What a bundle can do to the verifier: real bundles (made by `make_bundle`, signed with a throwaway SSH key),
then crafted copies. Each must be refused with one line, write nothing outside the verification folder, and
run nothing. No Docker: every refusal here happens before the images are looked at (the Docker half of the
flow is tests/test_publish_verify.py)."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fwbench.cli.commands import app
from fwbench.release import signing
from fwbench.release.bundle import MANIFEST, MAX_MEMBER_BYTES, VerificationRefused, make_bundle, open_bundle
from fwbench.release.record import Release
from fwbench_aggregator import verification
from tests.aggregator_rows import record, write
from tests.test_release import IMAGE

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="no ssh-keygen")


def make_signed_bundle(tmp_path: Path, key: Path, name: str = "bundle.tar.gz", ms: float = 10.0, **row) -> Path:
    results = tmp_path / f"rows-{name}"
    rng = np.random.default_rng(7)
    for repeat in range(3):
        write(results, record("keras3-jax", "bert-predict", compile_mode="xla", repeat=repeat,
                              step_ms=ms * np.exp(rng.normal(0, 0.02, 20)), image_digest=IMAGE.reference,
                              pin_set="paper-2024", image_variant="cpu", engine="docker", **row))
    release_path = tmp_path / f"release-{name}" / "release.json"
    release_path.parent.mkdir()
    release_path.write_text(Release("127.0.0.1:5000", "0.1.0", "abc", "2026-11-22T00:00:00Z", [IMAGE]).to_json())
    signing.sign_file(release_path, key)
    return make_bundle([results], release_path, tmp_path / name, sign_key=key)


def members_of(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}


def manifest_for(files: dict[str, bytes]) -> bytes:
    return json.dumps({"format": "fwbench-bundle", "format_version": 2, "members": {
        name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        for name, data in files.items() if not name.startswith("bundle.json")}}).encode()


def repack(path: Path, files: dict[str, bytes], extra: list[tarfile.TarInfo] = (), sign_key: Path | None = None) -> Path:
    """A bundle of `files` (+ crafted headers); with sign_key, its manifest re-signed by that key."""
    if sign_key is not None:
        manifest = path.with_suffix(".manifest")
        manifest.write_bytes(files[MANIFEST])
        files["bundle.json.sig"] = signing.sign_file(manifest, sign_key, signing.BUNDLE_NAMESPACE).read_bytes()
    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for info in extra:
            archive.addfile(info, io.BytesIO(b"x" * info.size) if info.isreg() else None)
    return path


def refused(bundle: Path, into: Path, allowed: Path | None, says: str, allow_unsigned: bool = False) -> None:
    with pytest.raises(VerificationRefused, match=says) as caught:
        open_bundle(bundle, into, allowed, allow_unsigned)
    assert "\n" not in str(caught.value)


def test_an_honest_bundle_opens_and_only_its_listed_files_come_out(tmp_path, key_pair):
    key, allowed = key_pair
    bundle = make_signed_bundle(tmp_path, key)
    into, line = open_bundle(bundle, tmp_path / "out" / "bundle", allowed, allow_unsigned=False)
    assert line.startswith("good signature by publisher@fwbench")
    listed = set(json.loads(members_of(bundle)[MANIFEST])["members"])
    assert {p.relative_to(into).as_posix() for p in into.rglob("*") if p.is_file()} == listed


def test_rows_edited_after_signing_are_refused(tmp_path, key_pair):
    """The headline attack: rows edited to be 3x faster. Without the key: the digest no longer matches; with
    the manifest recomputed to match, the signature no longer does."""
    key, allowed = key_pair
    files = members_of(make_signed_bundle(tmp_path, key))
    fast = members_of(make_signed_bundle(tmp_path, key, name="fast.tar.gz", ms=10.0 / 3))
    files["report/merged.parquet"] = fast["report/merged.parquet"]
    refused(repack(tmp_path / "edited.tar.gz", dict(files)), tmp_path / "a", allowed, "does not match")
    files[MANIFEST] = manifest_for(files)
    refused(repack(tmp_path / "remanifested.tar.gz", dict(files)), tmp_path / "b", allowed, "bad bundle signature")
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    refused(repack(tmp_path / "resigned.tar.gz", dict(files), sign_key=stranger), tmp_path / "c", allowed,
            "not by any key")
    unsigned = {k: v for k, v in files.items() if k != "bundle.json.sig"}
    refused(repack(tmp_path / "unsigned.tar.gz", unsigned), tmp_path / "d", allowed, "bundle is not signed")


@pytest.mark.parametrize("name", ["../evil", "/tmp/fwbench-evil-absolute", "report/../../evil", "report/./x",
                                  "report/a/b/c"])
def test_members_with_escaping_names_are_refused_and_nothing_is_written(tmp_path, key_pair, name):
    key, allowed = key_pair
    files = members_of(make_signed_bundle(tmp_path, key))
    files[name] = b"evil"
    files[MANIFEST] = manifest_for(files)  # even listed (and signed) by the publisher's own key
    bundle = repack(tmp_path / "crafted.tar.gz", files, sign_key=key)
    refused(bundle, tmp_path / "out" / "bundle", allowed, "may not hold")
    assert not Path("/tmp/fwbench-evil-absolute").exists() and not (tmp_path / "evil").exists()
    assert not (tmp_path / "out" / "bundle").exists()


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE, tarfile.CHRTYPE,
                                  tarfile.DIRTYPE])
def test_links_devices_and_folders_are_refused_even_when_listed(tmp_path, key_pair, kind):
    key, allowed = key_pair
    files = members_of(make_signed_bundle(tmp_path, key))
    files["report/link"] = b""
    files[MANIFEST] = manifest_for(files)
    del files["report/link"]
    info = tarfile.TarInfo("report/link")
    info.type, info.linkname = kind, ("/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else "")
    bundle = repack(tmp_path / "crafted.tar.gz", files, extra=[info], sign_key=key)
    refused(bundle, tmp_path / "out" / "bundle", allowed, "not a regular file")
    assert not (tmp_path / "out" / "bundle" / "report" / "link").exists()


def test_unlisted_and_duplicate_members_are_refused(tmp_path, key_pair):
    key, allowed = key_pair
    files = members_of(make_signed_bundle(tmp_path, key))
    extra = tarfile.TarInfo("report/extra.txt")
    extra.size = 3
    refused(repack(tmp_path / "extra.tar.gz", dict(files), extra=[extra]), tmp_path / "a", allowed,
            "does not list")
    again = tarfile.TarInfo("report/merged.parquet")
    again.size = 3
    refused(repack(tmp_path / "twice.tar.gz", dict(files), extra=[again]), tmp_path / "b", allowed, "twice")


def test_a_huge_member_is_refused_without_unpacking_it(tmp_path, key_pair):
    """A 256 MiB member (a 1 MiB-ish bundle): its header says so, and nothing of it is written or read whole."""
    key, allowed = key_pair
    files = members_of(make_signed_bundle(tmp_path, key))
    big = tarfile.TarInfo("report/big.bin")
    big.size = 256 * 2**20
    with tarfile.open(tmp_path / "huge.tar.gz", "w:gz", compresslevel=1) as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))

        class Zeros(io.RawIOBase):
            left = big.size

            def readinto(self, buffer):
                n = min(len(buffer), self.left)
                buffer[:n] = bytes(n)
                self.left -= n
                return n

        archive.addfile(big, Zeros())
    assert (tmp_path / "huge.tar.gz").stat().st_size < 2 * 2**20
    refused(tmp_path / "huge.tar.gz", tmp_path / "out", allowed, "does not list")
    # Listed in a re-signed manifest at its true size: over the cap, refused from the manifest alone.
    files[MANIFEST] = json.dumps({"format": "fwbench-bundle", "format_version": 2, "members": {
        **json.loads(files[MANIFEST])["members"], "report/big.bin": {"sha256": "0" * 64, "size": big.size}}}).encode()
    refused(repack(tmp_path / "listed.tar.gz", dict(files), sign_key=key), tmp_path / "out2", allowed, "may not hold")
    assert big.size > MAX_MEMBER_BYTES
    assert not any(p.stat().st_size > 2**20 for p in (tmp_path / "out2").rglob("*") if p.is_file())


@pytest.mark.parametrize("manifest, says", [
    (b"not json", "not an fwbench bundle manifest"),
    (b"[" * 100_000 + b"]" * 100_000, "not an fwbench bundle manifest"),
    (json.dumps({"format": "fwbench-bundle", "format_version": 1, "members": {}}).encode(), "bundle format 1"),
    (json.dumps({"format": "fwbench-bundle", "format_version": 2, "members": {"release.json": {"sha256": "x"}}}
                ).encode(), "may not hold"),
])
def test_a_malformed_manifest_is_one_line(tmp_path, key_pair, manifest, says):
    key, allowed = key_pair
    files = members_of(make_signed_bundle(tmp_path, key))
    files[MANIFEST] = manifest
    refused(repack(tmp_path / "bad.tar.gz", files, sign_key=key), tmp_path / "out", allowed, says)


def test_a_bundle_without_manifest_or_with_a_bad_allowed_signers_file(tmp_path, key_pair):
    key, allowed = key_pair
    bundle = make_signed_bundle(tmp_path, key)
    files = {k: v for k, v in members_of(bundle).items() if not k.startswith("bundle.json")}
    refused(repack(tmp_path / "old.tar.gz", files), tmp_path / "a", allowed, "has no bundle.json")
    garbage = tmp_path / "garbage_signers"
    garbage.write_text("this is\nnot an allowed signers \x00 file\n")
    refused(bundle, tmp_path / "b", garbage, "not by any key")
    refused(bundle, tmp_path / "c", None, "no --allowed-signers")
    _, line = open_bundle(bundle, tmp_path / "d", None, allow_unsigned=True)
    assert line.startswith("NOT VERIFIED")


def verify_cli(bundle: Path, out: Path, allowed: Path | None, *extra: str):
    args = ["verify", str(bundle), "--out", str(out), *(["--allowed-signers", str(allowed)] if allowed else []), *extra]
    return CliRunner().invoke(app, args)


def one_error_line(run, says: str) -> None:
    assert run.exit_code == 1, run.output
    lines = [line for line in run.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and says in lines[0], run.output
    assert "Traceback" not in run.output


@pytest.mark.parametrize("row, says", [
    ({"threads": -4}, "threads = -4, outside 1..1024"),
    ({"warmup_steps": 10**12}, "warmup_steps = 1000000000000, outside"),
])
def test_absurd_published_settings_are_refused_before_anything_runs(tmp_path, key_pair, row, says):
    key, allowed = key_pair
    bundle = make_signed_bundle(tmp_path, key, **row)
    run = verify_cli(bundle, tmp_path / "out", allowed)
    one_error_line(run, says)
    assert not (tmp_path / "out" / "results").exists()


def test_corrupt_rows_in_a_signed_bundle_are_one_line(tmp_path, key_pair):
    key, allowed = key_pair
    files = members_of(make_signed_bundle(tmp_path, key))
    files["report/merged.parquet"] = b"PAR1 this is not parquet PAR1"
    files[MANIFEST] = manifest_for(files)
    run = verify_cli(repack(tmp_path / "corrupt.tar.gz", files, sign_key=key), tmp_path / "out", allowed)
    one_error_line(run, "rows are not readable")


def test_out_holding_another_verification_is_refused(tmp_path, key_pair):
    """Verifying bundle B into bundle A's folder must never count A's rows (it once reported "2 reproduced")."""
    key, allowed = key_pair
    first = make_signed_bundle(tmp_path, key, name="a.tar.gz", threads=-1)  # refused after claiming its folder
    second = make_signed_bundle(tmp_path, key, name="b.tar.gz", threads=-2)
    out = tmp_path / "verified"
    one_error_line(verify_cli(first, out, allowed), "threads = -1")
    (out / "results").mkdir()  # as if A's re-runs were there
    one_error_line(verify_cli(second, out, allowed), "holds a verification of another bundle")
    one_error_line(verify_cli(first, out, allowed), "threads = -1")  # the same bundle may resume its folder
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    one_error_line(verify_cli(second, stray, allowed), "files that are not a verification of this bundle")
    assert (stray / "notes.txt").read_text() == "mine"


def test_text_from_rows_is_escaped_in_the_verification_report(tmp_path):
    nasty = "A100 <script>alert(1)</script> | **bold** \x1b[2J\x1b[31mred\nnext # [link](http://x)"
    cell = verification.VerifiedCell(
        stack="keras3-jax", task="bert-predict", preset="tiny", variant="xla", published_ms=10.0, rerun_ms=10.1,
        ratio=1.01, ratio_low=0.98, ratio_high=1.04, published_device=nasty, rerun_device=nasty,
        verdict="not comparable", detail=f"published on {nasty}, re-run on {nasty}", fails=True,
        published_repeats=3, rerun_repeats=5, interval_confidence=0.9)
    md = verification.write_report([cell], tmp_path, [("bundle", nasty)])
    text, page = md.read_text(), (tmp_path / "verification.html").read_text()
    for shown in (text, page):
        assert "\x1b" not in shown and "<script>" not in shown
    assert "\\<script\\>" in text and "\\| \\*\\*bold\\*\\*" in text and "\\[link\\]" in text
    table = [line for line in text.splitlines() if line.startswith("| keras3-jax")]
    assert len(table) == 1 and table[0].count(" | ") == len(verification.HEADERS) - 1
    assert "&lt;script&gt;" in page
