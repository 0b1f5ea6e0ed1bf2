"""`fwbench publish`: push built images, record them by digest (release.json + release.env + SBOMs), sign."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path


from fwbench import __version__
from fwbench.core.atomic import write_atomically
from fwbench.core.registry import IMAGE_REPOSITORY, IMAGE_TAG, image_name
from fwbench.release.record import Release, ReleaseError, compose_env, read_release


def git_revision() -> str:
    if os.environ.get("FWBENCH_GIT_REVISION"):
        return os.environ["FWBENCH_GIT_REVISION"]
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def publish(registry_host: str, pin_set: str, variant: str, stacks: list[str], out: Path, *, sign_key: Path | None,
            cosign_key: Path | None, image_template: str, pushed: bool = False) -> Release:
    """pushed: the images are already on the registry (CI's Buildx pushed them): record them by the digest their
    tag resolves to, reading their facts from a pull by that digest."""
    from fwbench.release import images, signing

    client = images.docker_client()
    registry_host = registry_host.rstrip("/")
    release_path = out / "release.json"
    release = Release(registry_host, __version__, git_revision(),
                      datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    if release_path.is_file():  # publishing another variant or pin set into the same release
        earlier = read_release(release_path)
        if earlier.registry == registry_host:
            release.images = list(earlier.images)
    tag = IMAGE_TAG.format(pin_set=pin_set, variant=variant)
    local_names = {s: image_name(s, pin_set, variant, image_template) for s in stacks}
    if pushed:
        local_names = {s: _pull_pushed(client, f"{registry_host}/{IMAGE_REPOSITORY.format(stack=s)}", tag) for s in stacks}
    missing = [name for name in local_names.values() if not _image_exists(client, name)]
    if missing:
        raise ReleaseError(f"not built: {', '.join(missing)} (docker compose build, see README)")
    (out / "sboms").mkdir(parents=True, exist_ok=True)
    for stack, local_name in local_names.items():
        repository = f"{registry_host}/{IMAGE_REPOSITORY.format(stack=stack)}"
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
    from fwbench.release import images

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
