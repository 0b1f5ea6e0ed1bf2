"""The release record: which images, by registry digest, a set of published numbers came from.

`fwbench publish` writes it (release.json, signed beside it, plus release.env for Compose); `fwbench run
--release` runs cells in exactly those images; `fwbench verify` checks images against it before re-running.
Plain data and JSON here: the Docker side lives in fwbench.release.images, signing in fwbench.release.signing.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fwbench.core.atomic import write_atomically
from fwbench.core.registry import IMAGE_REPOSITORY

RELEASE_FORMAT_VERSION = 1
# Inside every fwbench image (written by images/install.sh).
IMAGE_MANIFEST_PATH = "/opt/fwbench/manifest.json"
IMAGE_SBOM_PATH = "/opt/fwbench/sbom.cdx.json"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class ReleaseError(Exception):
    """A release file that cannot be used: one line for the user."""


@dataclass(frozen=True)
class ReleasedImage:
    stack: str
    variant: str
    pin_set: str
    repository: str  # registry/fwbench/<stack>, e.g. 127.0.0.1:5000/fwbench/keras3-jax
    tag: str  # the tag it was pushed under, e.g. paper-2024-cpu
    digest: str  # registry manifest digest: what a pull by digest fetches and checks
    image_id: str  # the image's config digest (docker image id)
    lock_sha256: str  # of the lock file the image installed (its manifest says so too)
    sbom_sha256: str  # of IMAGE_SBOM_PATH inside the image
    base_image: str  # FROM reference the image was built on
    base_image_digest: str | None  # registry digest of that base (None: a local base with no registry digest)
    git_revision: str

    @property
    def reference(self) -> str:
        """Pull reference by digest: what runs and what rows name (`image_digest`)."""
        return f"{self.repository}@{self.digest}"

    @property
    def tagged(self) -> str:
        return f"{self.repository}:{self.tag}"

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.stack, self.pin_set, self.variant)


@dataclass
class Release:
    registry: str
    fwbench_version: str
    git_revision: str
    created_at: str
    images: list[ReleasedImage] = field(default_factory=list)
    format_version: int = RELEASE_FORMAT_VERSION

    def image(self, stack: str, pin_set: str, variant: str) -> ReleasedImage | None:
        return next((i for i in self.images if i.key == (stack, pin_set, variant)), None)

    def by_reference(self, reference: str) -> ReleasedImage | None:
        return next((i for i in self.images if i.reference == reference), None)

    def to_json(self) -> str:
        data = asdict(self)
        data["images"] = sorted(data["images"], key=lambda i: (i["pin_set"], i["variant"], i["stack"]))
        return json.dumps(data, indent=2, sort_keys=True) + "\n"


def parse_release(text: str, source: str = "release.json") -> Release:
    try:
        data = json.loads(text)
        if data.get("format_version") != RELEASE_FORMAT_VERSION:
            raise ReleaseError(f"{source}: release format {data.get('format_version')!r} is not "
                               f"{RELEASE_FORMAT_VERSION} (made by another fwbench version)")
        images = [ReleasedImage(**entry) for entry in data.pop("images")]
        release = Release(**data, images=images)
    except ReleaseError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        raise ReleaseError(f"{source} is not an fwbench release record ({exc.__class__.__name__}: {exc})") from None
    for image in release.images:
        if not DIGEST.match(image.digest):
            raise ReleaseError(f"{source}: {image.stack} {image.pin_set}-{image.variant} has no valid digest "
                               f"({image.digest!r})")
    return release


def read_release(path: Path) -> Release:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ReleaseError(f"cannot read the release file {path}: {exc.strerror or exc}") from None
    return parse_release(text, str(path))


def env_name(stack: str) -> str:
    """The Compose variable holding a stack's '@sha256:...' suffix: FWBENCH_DIGEST_KERAS3_JAX."""
    return "FWBENCH_DIGEST_" + re.sub(r"[^A-Z0-9]", "_", stack.upper())


def compose_env(release: Release, pin_set: str, variant: str) -> str:
    """release.env: `docker compose --env-file release.env up bench-jax` then runs exactly the released images
    (compose.yaml appends each stack's digest to its image reference, and hands it to the rows)."""
    images = sorted((i for i in release.images if (i.pin_set, i.variant) == (pin_set, variant)), key=lambda i: i.stack)
    if not images:
        raise ReleaseError(f"the release has no {pin_set}-{variant} images")
    prefix = "/" + IMAGE_REPOSITORY.format(stack="")  # REGISTRY/fwbench/<stack>: the part before the stack
    registries = {i.repository.rsplit(prefix, 1)[0] for i in images}
    if len(registries) != 1 or not all(prefix in i.repository for i in images):
        raise ReleaseError("release.env needs every image under one REGISTRY/fwbench/ prefix")
    lines = [f"# fwbench release {release.git_revision[:12]}: {pin_set}-{variant} images by digest",
             f"FWBENCH_REGISTRY={registries.pop()}/", f"FWBENCH_PIN_SET={pin_set}", f"FWBENCH_VARIANT={variant}"]
    lines += [f"{env_name(i.stack)}=@{i.digest}" for i in images]
    return "\n".join(lines) + "\n"


def merge(parts: list[Release]) -> Release:
    """One release from several (CI builds each image in its own job): one registry and revision, each image once."""
    if not parts:
        raise ReleaseError("nothing to merge")
    first = parts[0]
    for part in parts[1:]:
        if (part.registry, part.git_revision) != (first.registry, first.git_revision):
            raise ReleaseError(f"cannot merge releases of {part.registry}@{part.git_revision[:12]} and "
                               f"{first.registry}@{first.git_revision[:12]}")
    images = {}
    for part in parts:
        for image in part.images:
            if image.key in images and images[image.key] != image:
                raise ReleaseError(f"two different {'/'.join(image.key)} images")
            images[image.key] = image
    return Release(first.registry, first.fwbench_version, first.git_revision, max(p.created_at for p in parts),
                   list(images.values()))


def main(argv: list[str] | None = None) -> int:
    """python -m fwbench.release merge OUT_DIR PART.json... : release.json plus one release-<pin set>-<variant>.env
    per pin set and variant (the release workflow's last job)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[0] != "merge":
        print("usage: python -m fwbench.release merge OUT_DIR PART.json...", file=sys.stderr)
        return 2
    try:
        release = merge([read_release(Path(p)) for p in args[2:]])
        out = Path(args[1])
        write_atomically(out / "release.json", release.to_json())
        for pin_set, variant in sorted({(i.pin_set, i.variant) for i in release.images}):
            write_atomically(out / f"release-{pin_set}-{variant}.env", compose_env(release, pin_set, variant))
    except ReleaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{out / 'release.json'}: {len(release.images)} image(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
