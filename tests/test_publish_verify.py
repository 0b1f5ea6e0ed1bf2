"""publish -> run --release -> bundle -> verify, for real: a registry on 127.0.0.1 (Debian's docker-registry,
started and stopped here), a real stack image pushed to it, release.json signed with a throwaway SSH key.
Then the refusals, each with one clear line and nothing re-run: a bad signature, a wrong digest, and a tampered
image (the released tag re-pushed with one extra layer).

Uses the keras3-jax CPU image of FWBENCH_E2E_PIN_SET (built by compose, as tests/test_docker_e2e.py does).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fwbench.engines.docker_client import docker_client
from fwbench.release.record import read_release
from tests.conftest import run_fwbench
from tests.test_docker_e2e import PIN_SET, REQUIRED, compose, docker_ready

pytestmark = pytest.mark.docker
STACK, SERVICE = "keras3-jax", "bench-jax"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def local_registry(tmp_path_factory):
    reason = docker_ready() or (None if shutil.which("docker-registry") else "no docker-registry (Debian package)")
    if reason:
        if REQUIRED:
            pytest.fail(f"FWBENCH_REQUIRE_DOCKER=1 but {reason}")
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = work / "config.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {work / 'data'}\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n")
    log = open(work / "registry.log", "w")
    process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        process.kill()
        pytest.fail(f"docker-registry did not start: {(work / 'registry.log').read_text()[-500:]}")
    yield f"127.0.0.1:{port}"
    client = docker_client()  # the pushed tags and the tampered image: no disk left behind
    for image in client.images.list():
        if any(tag.startswith(f"127.0.0.1:{port}/") for tag in image.tags):
            for tag in image.tags:
                if tag.startswith(f"127.0.0.1:{port}/"):
                    client.images.remove(tag, force=True)
    process.terminate()
    process.wait(timeout=30)
    log.close()
    shutil.rmtree(work / "data", ignore_errors=True)


@pytest.fixture(scope="module")
def published(local_registry, tmp_path_factory):
    """The image built, pushed and released (signed), a tiny run in it by digest, and its bundle."""
    work = tmp_path_factory.mktemp("publish")
    env = {**os.environ, "FWBENCH_PIN_SET": PIN_SET, "COMPOSE_PROJECT_NAME": "fwbench-e2e"}
    built = compose(env, "build", SERVICE, timeout=5400)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    key = work / "publisher"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", str(key)], check=True)
    allowed = work / "allowed_signers"
    allowed.write_text(f"publisher@test {key.with_suffix('.pub').read_text()}")
    done = run_fwbench("publish", "--registry", local_registry, "--pin-set", PIN_SET, "--variant", "cpu",
                       "--stack", STACK, "--out", str(work / "release"), "--sign-key", str(key))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    release = read_release(work / "release" / "release.json")
    [image] = release.images
    assert image.reference.startswith(f"{local_registry}/fwbench/{STACK}@sha256:")
    assert len(image.lock_sha256) == 64 and len(image.sbom_sha256) == 64
    assert (work / "release" / "release.json.sig").is_file()
    assert f"FWBENCH_DIGEST_KERAS3_JAX=@{image.digest}" in (work / "release" / "release.env").read_text()
    sbom = (work / "release" / "sboms" / f"{STACK}-{PIN_SET}-cpu.cdx.json").read_text()
    assert '"bomFormat": "CycloneDX"' in sbom and "pkg:pypi/jax@" in sbom and "pkg:deb/debian/" in sbom
    # 100 steps: a tiny step takes milliseconds and jitters; the median of 10 of them moved up to 2x from one
    # container to the next here, the median of 100 about 10% (5 repeats each, 2026-11-25, the 2-core machine).
    # 3 repeats, the judge's minimum (CI time: each is a container start, JAX's imports and compile).
    done = run_fwbench("run", "--engine", "docker", "--release", str(work / "release" / "release.json"),
                       "--pin-set", PIN_SET, "--stack", STACK, "--task", "bert-predict", "--preset", "tiny",
                       "--steps", "100", "--repeats", "3", "--data", str(work / "data"), "--out", str(work / "results"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    row_files = sorted((work / "results").rglob("*.parquet"))
    assert len(row_files) == 3
    assert {d for f in row_files for d in pq.read_table(f).column("image_digest").to_pylist()} == {image.reference}
    done = run_fwbench("bundle", str(work / "results"), "--release", str(work / "release" / "release.json"),
                       "-o", str(work / "bundle.tar.gz"), "--sign-key", str(key))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {"work": work, "allowed": allowed, "key": key, "release": release, "image": image,
            "registry": local_registry}


def verify(published, bundle: Path, out: Path, *extra: str):
    return run_fwbench("verify", str(bundle), "--allowed-signers", str(published["allowed"]), "--out", str(out), *extra)


def assert_refused(done, says: str, out: Path) -> None:
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and says in lines[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert not (out / "results").exists(), "a refused verification re-ran cells"


def rewrite_bundle(published, name: str, edit, resign: bool = True) -> Path:
    """A copy of the bundle with edit(files: dict[name, bytes]) applied; with resign, its manifest made anew
    and signed by the publisher's key (a dishonest publisher: the bundle's own signature is then good)."""
    files = {}
    with tarfile.open(published["work"] / "bundle.tar.gz") as archive:
        for member in archive.getmembers():
            if member.isfile():
                files[member.name] = archive.extractfile(member).read()
    edit(files)
    if resign:
        manifest = json.loads(files["bundle.json"])
        manifest["members"] = {member: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
                               for member, data in files.items() if not member.startswith("bundle.json")}
        signed = published["work"] / "resign" / "bundle.json"
        signed.parent.mkdir(exist_ok=True)
        signed.write_text(json.dumps(manifest))
        Path(str(signed) + ".sig").unlink(missing_ok=True)
        subprocess.run(["ssh-keygen", "-Y", "sign", "-q", "-f", str(published["key"]), "-n", "fwbench-bundle",
                        str(signed)], check=True, capture_output=True)
        files["bundle.json"] = signed.read_bytes()
        files["bundle.json.sig"] = Path(str(signed) + ".sig").read_bytes()
    path = published["work"] / name
    with tarfile.open(path, "w:gz") as archive:
        for member_name, data in files.items():
            info = tarfile.TarInfo(member_name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_verify_passes_on_the_published_bundle(published):
    """An honest 3-repeat bundle, re-run 3 times in the released image (the judge's minimum: CI time), at a stated
    tolerance of +-25%: never a false claim (slower, faster, not reproduced), and reproduced or, honestly,
    inconclusive.

    Why inconclusive is accepted: tiny cells in containers here vary up to 2x from one process to the next
    (per-process medians of 100 steps 2.9-5.9 ms, 10 repeats, 2026-11-25, the 2-core development machine; a
    log-sd of 0.17), and at that noise even 5 repeats a side call an honest bundle reproduced only about 40% of the
    time (simulated with verify's own rule); 3 a side, less often. Reproducing is a matter of power (more repeats,
    a quieter machine); what verify must never do is accuse an honest publisher, which this test checks, with
    --allow-inconclusive so that the exit status says the same. test_verify_fails_rows_edited_to_be_3x_faster
    checks that a real difference is caught."""
    out = published["work"] / "verify-ok"
    done = verify(published, published["work"] / "bundle.tar.gz", out, "--tolerance", "25", "--allow-inconclusive",
                  "--repeats", "3", "--max-repeats", "3")  # added re-runs: tests/test_verify_added_repeats.py
    assert (out / "report" / "verification.md").is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    report = (out / "report" / "verification.md").read_text()
    assert "good signature by publisher@test" in report
    [cell] = pq.read_table(out / "report" / "verification.parquet").to_pylist()
    assert (cell["stack"], cell["task"], cell["preset"]) == ("keras3-jax", "bert-predict", "tiny")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert cell["verdict"] in ("reproduced", "inconclusive"), cell["detail"]
    assert "not reproduced" not in report and "(FAIL)" not in report
    if cell["verdict"] == "inconclusive":
        # Busy rows decide nothing (fwbench_aggregator.judge): a side measured only busy is "not judged: busy".
        assert ("straddles a tolerance bound" in cell["detail"] or "busy rows" in cell["detail"]
                or cell["detail"].startswith("not judged: busy")), cell["detail"]
        print(f"\nan honest inconclusive: {cell['detail']}")
    else:
        assert "| reproduced |" in report
    assert (out / "report" / "verification.html").is_file() and (out / "report" / "verification.parquet").is_file()
    reruns = sorted((out / "results").rglob("*.parquet"))
    assert len(reruns) == 3
    assert {d for f in reruns for d in pq.read_table(f).column("image_digest").to_pylist()} == {
        published["image"].reference}


def faster_rows(files, factor: float = 3.0) -> None:
    """The published rows edited to claim `factor` times the speed the image delivers."""
    import pyarrow as pa

    table = pq.read_table(io.BytesIO(files["report/merged.parquet"]))
    for column in ("ms_per_step", "step_ms"):
        index = table.schema.get_field_index(column)
        values = table.column(column).to_pylist()
        scaled = [None if v is None else ([x / factor for x in v] if isinstance(v, list) else v / factor)
                  for v in values]
        table = table.set_column(index, table.schema.field(index), pa.array(scaled, type=table.schema.field(index).type))
    sink = io.BytesIO()
    pq.write_table(table, sink)
    files["report/merged.parquet"] = sink.getvalue()


def test_verify_fails_rows_edited_to_be_3x_faster(published):
    """Edited by a third party: the bundle's signature no longer covers them, refused before anything runs.
    Edited and re-signed by the publisher: re-run, judged "slower" (the image is slower than the rows claim), exit 1.
    (With busy rows the verdict may be "inconclusive", "not judged: busy" where a side has no quiet row: it fails as
    well and says why.)"""
    out = published["work"] / "verify-edited"
    assert_refused(verify(published, rewrite_bundle(published, "edited.tar.gz", faster_rows, resign=False), out),
                   "does not match", out)
    out = published["work"] / "verify-faster"
    done = verify(published, rewrite_bundle(published, "faster.tar.gz", faster_rows), out, "--repeats", "3", "--max-repeats", "3")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert (out / "report" / "verification.parquet").is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    [cell] = pq.read_table(out / "report" / "verification.parquet").to_pylist()
    if cell["verdict"] == "inconclusive":
        # A busy machine may leave the re-run too noisy to call "slower", or leave a side short of 3 quiet repeats
        # (its detail says which rows were busy); the verdict still fails the bundle.
        assert cell["fails"] and ("busy rows" in cell["detail"] or cell["detail"].startswith("not judged: busy")), \
            cell["detail"]
        assert "| inconclusive (FAIL) |" in (out / "report" / "verification.md").read_text()
    else:
        assert "| slower (FAIL) |" in (out / "report" / "verification.md").read_text()
    assert "Traceback" not in done.stderr


def test_verify_refuses_a_bad_signature(published):
    def edit(files):
        files["release.json"] = files["release.json"].replace(b'"fwbench_version": "', b'"fwbench_version": "x')

    out = published["work"] / "verify-bad-signature"
    assert_refused(verify(published, rewrite_bundle(published, "bad-signature.tar.gz", edit), out),
                   "bad release signature", out)  # the bundle re-signed, release.json's signature left stale
    out = published["work"] / "verify-no-signers"
    done = run_fwbench("verify", str(published["work"] / "bundle.tar.gz"), "--out", str(out))
    assert_refused(done, "--allowed-signers", out)


def test_verify_refuses_a_wrong_digest(published):
    """release.json (re-signed by the publisher's key) and the rows name a digest the registry does not have."""
    image = published["image"]
    wrong = "sha256:" + "0" * 64

    def edit(files):
        files["release.json"] = files["release.json"].replace(image.digest.encode(), wrong.encode())
        table = pq.read_table(io.BytesIO(files["report/merged.parquet"]))
        digests = [d.replace(image.digest, wrong) for d in table.column("image_digest").to_pylist()]
        import pyarrow as pa

        table = table.set_column(table.schema.get_field_index("image_digest"), "image_digest", pa.array(digests))
        sink = io.BytesIO()
        pq.write_table(table, sink)
        files["report/merged.parquet"] = sink.getvalue()
        signed = published["work"] / "resign" / "release.json"
        signed.parent.mkdir(exist_ok=True)
        signed.write_bytes(files["release.json"])
        subprocess.run(["ssh-keygen", "-Y", "sign", "-q", "-f", str(published["key"]), "-n", "fwbench-release",
                        str(signed)], check=True, capture_output=True)
        files["release.json.sig"] = Path(str(signed) + ".sig").read_bytes()
        Path(str(signed) + ".sig").unlink()

    out = published["work"] / "verify-wrong-digest"
    assert_refused(verify(published, rewrite_bundle(published, "wrong-digest.tar.gz", edit), out),
                   f"cannot pull {image.repository}@{wrong}", out)


def test_verify_refuses_a_tampered_image(published):
    """The released tag re-pushed with one extra layer: pulling by digest still gets the original, but the tag
    no longer names it, and verify refuses rather than vouch for a release whose images changed."""
    client = docker_client()
    image = published["image"]
    container = client.containers.run(image.reference, entrypoint=["sh", "-c", "echo tampered > /tmp/extra"],
                                      detach=True, network_disabled=True)
    container.wait()
    container.commit(repository=image.repository, tag=image.tag)
    container.remove()
    pushed = client.api.push(image.repository, tag=image.tag)
    assert "error" not in pushed.lower(), pushed[-500:]
    out = published["work"] / "verify-tampered"
    assert_refused(verify(published, published["work"] / "bundle.tar.gz", out), "tampered", out)
