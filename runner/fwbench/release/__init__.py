"""Publish and verify: the release record (images by digest), signatures, the Docker side of releases, bundles, and the third-party verification run."""
