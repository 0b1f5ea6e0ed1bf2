"""Build step of every fwbench image (run by images/install.sh, never on a host): one CycloneDX JSON SBOM of the
image at /opt/fwbench/sbom.cdx.json: the Python environment (from cyclonedx-py, given as the first argument), the
Debian packages (dpkg) and the interpreter of the base image, with the image's own facts as the main component.
Deterministic (sorted, no timestamp): the same image content gives the same file, whose SHA-256 a release records.
"""

import json
import os
import platform
import subprocess
import sys


def debian_packages():
    listing = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${Architecture}\n"],
                             capture_output=True, text=True, check=True).stdout
    components = []
    for line in sorted(listing.splitlines()):
        name, version, arch = line.split("\t")
        purl = f"pkg:deb/debian/{name}@{version}?arch={arch}"
        components.append({"type": "library", "bom-ref": purl, "name": name, "version": version, "purl": purl})
    return components


def main(python_sbom: str, out: str) -> None:
    with open(python_sbom) as f:
        bom = json.load(f)
    components = bom.get("components", []) + debian_packages()
    components.append({"type": "application", "bom-ref": "interpreter:cpython", "name": "cpython",
                       "version": platform.python_version(), "description": f"base image interpreter {sys.executable}"})
    bom["components"] = sorted(components, key=lambda c: (c.get("purl") or c["bom-ref"]))
    facts = {key: os.environ.get(f"FWBENCH_{key.upper()}", "") for key in ("stack", "variant", "pin_set", "base_image")}
    bom.setdefault("metadata", {})["component"] = {
        "type": "container", "bom-ref": "fwbench-image", "name": f"fwbench/{facts['stack']}",
        "version": f"{facts['pin_set']}-{facts['variant']}",
        "properties": [{"name": f"fwbench:{key}", "value": value} for key, value in sorted(facts.items())]}
    with open(out, "w") as f:
        json.dump(bom, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
