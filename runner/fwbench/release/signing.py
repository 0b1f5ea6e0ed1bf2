"""Signing release.json, and checking its signature (trust model: docs/verification.md).

Offline and everywhere: an SSH signature (`ssh-keygen -Y sign`, OpenSSH >= 8.1) in release.json.sig, checked
against an allowed-signers file the verifier obtained from the publisher out of band: a key that travels
inside the bundle proves nothing. cosign, when it is on PATH, additionally signs the images by digest (keyless
in CI, or with --cosign-key); it cannot be installed on the machine this project is developed on, so that path
is written but untested here.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

NAMESPACE = "fwbench-release"  # ssh-keygen -n: a signature for another purpose never verifies as a release's
BUNDLE_NAMESPACE = "fwbench-bundle"  # a bundle manifest's signature (the rows): never valid as a release's, nor back


class SigningError(Exception):
    """Signing or a signature check failed: one line for the user."""


def _ssh_keygen(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    if shutil.which("ssh-keygen") is None:
        raise SigningError("ssh-keygen (OpenSSH) is needed to sign or check a release")
    return subprocess.run(["ssh-keygen", *args], input=stdin, capture_output=True, timeout=60)


def sign_file(path: Path, key: Path, namespace: str = NAMESPACE) -> Path:
    """Write path + '.sig' (an SSH signature of the file's bytes)."""
    signature = Path(str(path) + ".sig")
    signature.unlink(missing_ok=True)
    done = _ssh_keygen("-Y", "sign", "-f", str(key), "-n", namespace, str(path))
    if done.returncode != 0 or not signature.is_file():
        raise SigningError(f"signing {path} with {key} failed: {done.stderr.decode(errors='replace').strip()}")
    return signature


def verify_bytes(data: bytes, signature: Path, allowed_signers: Path, namespace: str = NAMESPACE,
                 what: str = "release") -> str:
    """The signer's identity if `signature` is a valid signature of `data` by a key in allowed_signers."""
    if not signature.is_file():
        raise SigningError(f"the {what} is not signed (no {signature.name})")
    if not allowed_signers.is_file():
        raise SigningError(f"no allowed-signers file at {allowed_signers}")
    found = _ssh_keygen("-Y", "find-principals", "-s", str(signature), "-f", str(allowed_signers))
    principals = found.stdout.decode(errors="replace").split()
    if found.returncode != 0 or not principals:
        reason = _one_line(found.stderr.decode(errors="replace")) or "no principal"
        raise SigningError(f"the {what} signature is not by any key in {allowed_signers}: {reason}")
    for principal in principals:
        checked = _ssh_keygen("-Y", "verify", "-f", str(allowed_signers), "-I", principal, "-n", namespace,
                              "-s", str(signature), stdin=data)
        if checked.returncode == 0:
            return principal
    file_name = signature.name.removesuffix(".sig")
    raise SigningError(f"bad {what} signature: {file_name} was changed after signing, or the signature is not "
                       f"for it ({_one_line(checked.stderr.decode(errors='replace'))})")


def _one_line(text: str) -> str:
    """ssh-keygen's message, on one line (it may quote a malformed allowed-signers file)."""
    return " ".join(text.split())[:300]


def cosign_available() -> bool:
    return shutil.which("cosign") is not None


def cosign_sign_image(reference: str, key: Path | None) -> None:
    """cosign sign by digest: keyless (OIDC, e.g. in GitHub Actions) without a key. Untested here (no cosign)."""
    argv = ["cosign", "sign", "--yes", *(["--key", str(key)] if key else []), reference]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SigningError(f"cosign could not sign {reference}: {done.stderr.strip()[-300:]}")


def cosign_verify_image(reference: str, key: Path) -> None:
    """cosign verify with the publisher's public key. Untested here (no cosign)."""
    done = subprocess.run(["cosign", "verify", "--key", str(key), reference], capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        raise SigningError(f"cosign signature check of {reference} failed: {done.stderr.strip()[-300:]}")


GITHUB_OIDC_ISSUER = "https://token.actions.githubusercontent.com"


def cosign_verify_blob(path: Path, bundle: Path, identity_regexp: str, issuer: str = GITHUB_OIDC_ISSUER) -> str:
    """A keyless cosign signature of release.json (the release workflow's), checked against the identity of the
    workflow that must have signed it. Untested here (no cosign)."""
    if not cosign_available():
        raise SigningError("cosign is not on PATH: cannot check the keyless signature")
    if not bundle.is_file():
        raise SigningError(f"the release has no cosign signature ({bundle.name})")
    done = subprocess.run(["cosign", "verify-blob", "--bundle", str(bundle), "--certificate-identity-regexp",
                           identity_regexp, "--certificate-oidc-issuer", issuer, str(path)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SigningError(f"bad keyless release signature: {done.stderr.strip()[-300:]}")
    return f"keyless cosign signature by an identity matching {identity_regexp}"
