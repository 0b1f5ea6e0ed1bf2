"""Docker side of a release (docker-py): push an fwbench image and describe it, and check a pulled image
against its release entry. Every failure is a ReleaseError with one line saying what did not match.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

from fwbench.release.record import IMAGE_MANIFEST_PATH, IMAGE_SBOM_PATH, ReleaseError, ReleasedImage
from fwbench.engines.docker_client import docker_client as engine_client

LABEL_STACK, LABEL_VARIANT, LABEL_PIN_SET = "io.fwbench.stack", "io.fwbench.variant", "io.fwbench.pin-set"


def docker_client():
    try:
        import docker  # noqa: F401 (only: is the SDK installed?)
    except ImportError:
        raise ReleaseError("publishing and verifying need the Docker SDK: pip install 'fwbench[docker]'") from None
    try:
        client = engine_client()
        client.ping()
    except Exception as exc:  # docker.errors.DockerException and connection errors
        raise ReleaseError(f"cannot reach a Docker engine: {exc}") from None
    return client


def read_image_files(client, reference: str, *paths: str) -> dict[str, bytes]:
    """Files from an image, without running it (one created, never started container)."""
    container = client.containers.create(reference, entrypoint=["/bin/true"], network_disabled=True)
    try:
        found = {}
        for path in paths:
            try:
                stream, _stat = container.get_archive(path)
            except Exception as exc:  # docker.errors.NotFound when the file is missing
                raise ReleaseError(f"{reference} has no {path} (not an fwbench image of this version?): "
                                   f"{exc.__class__.__name__}") from None
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
                found[path] = archive.extractfile(archive.next()).read()
        return found
    finally:
        container.remove(force=True)


def image_facts(client, reference: str) -> dict:
    """What a release records about an image: id, labels, manifest (lock hash, base image) and SBOM."""
    image = client.images.get(reference)
    labels = image.labels or {}
    if LABEL_STACK not in labels:
        raise ReleaseError(f"{reference} is not an fwbench image (no {LABEL_STACK} label)")
    files = read_image_files(client, reference, IMAGE_MANIFEST_PATH, IMAGE_SBOM_PATH)
    sbom = files[IMAGE_SBOM_PATH]
    return {"image": image, "labels": labels, "manifest": json.loads(files[IMAGE_MANIFEST_PATH]), "sbom": sbom,
            "sbom_sha256": hashlib.sha256(sbom).hexdigest()}


def base_image_digest(client, base_image: str) -> str | None:
    """The base image's registry digest: from its reference when pinned by digest, else from the local copy's
    RepoDigests (None for a local base that never came from a registry, e.g. CI's stand-in)."""
    if "@sha256:" in base_image:
        return base_image.rsplit("@", 1)[1]
    try:
        digests = client.images.get(base_image).attrs.get("RepoDigests") or []
    except Exception:  # not present locally
        return None
    return digests[0].rsplit("@", 1)[1] if digests else None


def push(client, local_name: str, repository: str, tag: str) -> str:
    """Tag local_name as repository:tag, push it, return the registry's manifest digest."""
    image = client.images.get(local_name)
    image.tag(repository, tag)
    digest = None
    for event in client.api.push(repository, tag=tag, stream=True, decode=True):
        if "error" in event:
            raise ReleaseError(f"pushing {repository}:{tag} failed: {event['error']}")
        digest = (event.get("aux") or {}).get("Digest") or digest
    if not digest:
        raise ReleaseError(f"pushing {repository}:{tag} reported no digest")
    return digest


def release_entry(client, local_name: str, repository: str, tag: str,
                  digest: str) -> tuple[ReleasedImage, bytes]:
    """The image's release entry, and its SBOM (to store beside the release)."""
    facts = image_facts(client, local_name)
    labels, manifest = facts["labels"], facts["manifest"]
    base = manifest.get("base_image") or labels.get("org.opencontainers.image.base.name") or ""
    return ReleasedImage(
        stack=labels[LABEL_STACK], variant=labels.get(LABEL_VARIANT, ""), pin_set=labels.get(LABEL_PIN_SET, ""),
        repository=repository, tag=tag, digest=digest, image_id=facts["image"].id,
        lock_sha256=manifest.get("lock_sha256", ""), sbom_sha256=facts["sbom_sha256"], base_image=base,
        base_image_digest=base_image_digest(client, base), git_revision=manifest.get("git_revision", "unknown")
    ), facts["sbom"]


def registry_digest(client, tagged: str) -> str:
    """The digest a tag resolves to on its registry now (docker's distribution inspect)."""
    try:
        return client.api.inspect_distribution(tagged)["Descriptor"]["digest"]
    except Exception as exc:
        raise ReleaseError(f"cannot resolve {tagged} on its registry: {exc}") from None


def check_image(client, released: ReleasedImage) -> None:
    """Pull the released image by digest and refuse any difference from the release entry."""
    import docker

    name = f"{released.stack} {released.pin_set}-{released.variant}"
    try:
        image = client.images.pull(released.reference)
    except docker.errors.APIError as exc:
        raise ReleaseError(f"{name}: cannot pull {released.reference}: "
                           f"{exc.explanation or exc}".replace("\n", " ")) from None
    now = registry_digest(client, released.tagged)
    if now != released.digest:
        raise ReleaseError(f"{name}: {released.tagged} now resolves to {now}, not the released {released.digest} "
                           "(the tag was re-pushed: a changed or tampered image)")
    if image.id != released.image_id:
        raise ReleaseError(f"{name}: image id {image.id} is not the released {released.image_id}")
    facts = image_facts(client, released.reference)
    labels = facts["labels"]
    found = (labels.get(LABEL_STACK), labels.get(LABEL_PIN_SET), labels.get(LABEL_VARIANT))
    if found != released.key:
        raise ReleaseError(f"{name}: the image's labels say {'/'.join(map(str, found))}")
    if facts["manifest"].get("lock_sha256") != released.lock_sha256:
        raise ReleaseError(f"{name}: lock-file SHA-256 {facts['manifest'].get('lock_sha256')} is not the released "
                           f"{released.lock_sha256}")
    if facts["sbom_sha256"] != released.sbom_sha256:
        raise ReleaseError(f"{name}: SBOM SHA-256 {facts['sbom_sha256']} is not the released {released.sbom_sha256}")
