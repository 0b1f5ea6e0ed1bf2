"""`fwbench k8s render`: the plan as Kubernetes objects, for the cluster's own scheduler to run.

Per stack (an Indexed Job has one pod template, so one image): a ConfigMap holding that stack's cells (one
CellSpec per completion index) and an Indexed Job whose pod k runs cell k in the stack's released image, by
digest, with the current engine: its cells' --devices GPUs (nvidia.com/gpu: N, 1 without --devices; on a CPU run at
least N CPUs, a core per rank), CPU and memory requested and limited, non-root,
read-only root filesystem, seccomp RuntimeDefault, no capabilities (admitted under Pod Security "restricted"),
scratch space in size-limited emptyDirs, results to a PersistentVolumeClaim in the usual one-file-per-cell layout (atomic, so a retried or resubmitted index
resumes). A NetworkPolicy denies the pods all traffic (Kubernetes has no per-pod "no network"; the policy
needs a CNI that enforces it). Plain dictionaries: rendering needs no Kubernetes client.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from fwbench.core import model_file
from fwbench.core.spec import CellSpec

PLAN_KEY = "cells.json"
APP_LABEL = "app.kubernetes.io/name"
UID = 1000  # the images' fwbench user


MAX_NAME = 63  # a DNS-1123 label (names used as labels, and Job names, whose pods' labels carry them)
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
SUFFIX = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
          "Ti": 2**40}


@dataclass(frozen=True)
class PodResources:
    """What each pod requests and is limited to (requests = limits: a Guaranteed pod, steady timings)."""
    cpu: str = "8"
    memory: str = "32Gi"
    scratch: str = "16Gi"  # each of the data and /tmp emptyDirs
    shm: str = "2Gi"

    def check(self) -> None:
        for name, value in (("--cpu", self.cpu), ("--memory", self.memory), ("--scratch", self.scratch)):
            if not QUANTITY.match(value):
                raise ValueError(f"{name} {value!r} is not a Kubernetes quantity (e.g. 8, 500m, 32Gi)")

    def cpus(self) -> float:
        """The CPU quantity in cores (500m = 0.5)."""
        match = QUANTITY.match(self.cpu)
        return float(self.cpu[:len(self.cpu) - len(match.group(2) or "")]) * SUFFIX[match.group(2) or ""]


def object_name(prefix: str, stack: str) -> str:
    """DNS-1123 names: lower case, digits, '-', at most 63 characters. A longer name is cut and given a
    hash of the whole, so two long names that share their first 63 characters still differ."""
    name = f"{prefix}-{stack}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:MAX_NAME - len(digest) - 1].rstrip('-')}-{digest}"


MAX_CONFIGMAP_BYTES = 1_000_000  # Kubernetes refuses a ConfigMap over 1 MiB


def model_file_key(sha256: str) -> str:
    """The plan ConfigMap's key holding a model file (`--model FILE`); the pod sees it at /plan/<key>."""
    return f"model-{sha256[:16]}.py"


def plan_configmap(prefix: str, stack: str, specs: list[CellSpec], namespace: str | None) -> dict:
    """The stack's cells, and the model files they run (`--model`), which the pods read from /plan: the bytes
    rendered, checked against the SHA-256 the cells carry."""
    data, cells = {}, []
    for spec in specs:
        if spec.model_file is not None:
            key = model_file_key(spec.model_sha256)
            if key not in data:
                data[key] = _model_text(Path(spec.model_file), spec.model_sha256)
            spec = replace(spec, model_file=f"/plan/{key}")
        cells.append(asdict(replace(spec, data_dir="/data", engine="current")))
    data = {PLAN_KEY: json.dumps(cells, indent=1, sort_keys=True), **data}
    if sum(len(text.encode()) for text in data.values()) > MAX_CONFIGMAP_BYTES:
        raise ValueError(f"the plan of {stack} is over the 1 MiB a ConfigMap may hold: render fewer cells or a "
                         "smaller model file")
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _metadata(object_name(prefix, stack), stack, prefix, namespace), "data": data}


def _model_text(path: Path, sha256: str) -> str:
    try:
        payload = model_file.planned_bytes(path, sha256)
    except model_file.ModelFileChanged:
        raise ValueError(f"--model {path} changed while the cells were planned: render again") from None
    except model_file.ModelFileError as exc:
        raise ValueError(f"--model {exc}") from None
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"--model {path} is not UTF-8 text") from None


def indexed_job(prefix: str, stack: str, image: str, count: int, parallelism: int, *, results_claim: str,
                gpu: bool, namespace: str | None, resources: PodResources = PodResources(),
                backoff_limit: int = 3, gpus: int = 1) -> dict:
    """The Job of one stack's cells; on a GPU run each pod gets `gpus` GPUs (its cells' --devices), no more."""
    name = object_name(prefix, stack)
    container = {
        "name": "cell",
        "image": image,
        # The image's entrypoint is `fwbench`: run the cell of this pod's completion index.
        "args": ["k8s", "run-cell", f"/plan/{PLAN_KEY}", "--out", "/results"],
        "env": [{"name": "HOME", "value": "/tmp"}, {"name": "XDG_CACHE_HOME", "value": "/tmp/cache"},
                {"name": "KERAS_HOME", "value": "/tmp/keras"}, {"name": "FWBENCH_IMAGE_DIGEST", "value": image},
                {"name": "XLA_PYTHON_CLIENT_PREALLOCATE", "value": "false"},
                {"name": "TF_FORCE_GPU_ALLOW_GROWTH", "value": "true"}],
        "volumeMounts": [{"name": "plan", "mountPath": "/plan", "readOnly": True},
                         {"name": "results", "mountPath": "/results"},
                         {"name": "data", "mountPath": "/data"}, {"name": "tmp", "mountPath": "/tmp"},
                         {"name": "shm", "mountPath": "/dev/shm"}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID,
                            "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
        "resources": {"requests": {"cpu": resources.cpu, "memory": resources.memory},
                      "limits": {"cpu": resources.cpu, "memory": resources.memory}},
    }
    if gpu:
        container["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)  # a Quantity: a string in the API
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": _metadata(name, stack, prefix, namespace),
        "spec": {
            "completionMode": "Indexed", "completions": count, "parallelism": min(parallelism, count),
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"labels": _labels(stack, prefix)},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    "volumes": [
                        {"name": "plan", "configMap": {"name": name}},
                        {"name": "results", "persistentVolumeClaim": {"claimName": results_claim}},
                        # Shared inputs are regenerated per pod (deterministic from the seed; input_sha256
                        # on every row proves it), so pods never write one file concurrently.
                        {"name": "data", "emptyDir": {"sizeLimit": resources.scratch}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": resources.scratch}},
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": resources.shm}},
                    ],
                },
            },
        },
    }


def deny_all_network_policy(prefix: str, namespace: str | None) -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": object_name(prefix, "no-network"), **({"namespace": namespace} if namespace else {}),
                         "labels": {APP_LABEL: "fwbench"}},
            "spec": {"podSelector": {"matchLabels": {"fwbench.io/run": prefix}},
                     "policyTypes": ["Ingress", "Egress"]}}


def _labels(stack: str, prefix: str) -> dict:
    return {APP_LABEL: "fwbench", "fwbench.io/stack": stack, "fwbench.io/run": prefix}


def _metadata(name: str, stack: str, prefix: str, namespace: str | None) -> dict:
    return {"name": name, **({"namespace": namespace} if namespace else {}), "labels": _labels(stack, prefix)}


def render(specs: list[CellSpec], images: dict[str, str], out_dir: Path, prefix: str, parallelism: int,
           *, results_claim: str, gpu: bool, namespace: str | None, resources: PodResources = PodResources()) -> list[Path]:
    """One YAML file per stack (ConfigMap + Job) and the NetworkPolicy; returns the files written."""
    import yaml

    resources.check()
    written = []
    by_stack: dict[str, list[CellSpec]] = {}
    for spec in specs:
        by_stack.setdefault(spec.stack, []).append(spec)
    names = [object_name(prefix, stack) for stack in by_stack] + [object_name(prefix, "no-network")]
    if len(set(names)) != len(names):  # cut names are hashed apart; this guards the rule itself
        raise ValueError(f"--name {prefix!r} gives two objects the same name: choose another")
    out_dir.mkdir(parents=True, exist_ok=True)
    devices = max(spec.devices for spec in specs)
    if not gpu and resources.cpus() < devices:
        raise ValueError(f"--devices {devices} on a CPU run needs --cpu of at least {devices} (a core per rank), "
                         f"got {resources.cpu}")
    for stack, cells in by_stack.items():
        # One pod template per Job: its GPU count is the most any of its cells asks for (one --devices per render).
        documents = [plan_configmap(prefix, stack, cells, namespace),
                     indexed_job(prefix, stack, images[stack], len(cells), parallelism, results_claim=results_claim,
                                 gpu=gpu, namespace=namespace, resources=resources,
                                 gpus=max(cell.devices for cell in cells))]
        path = out_dir / f"{object_name(prefix, stack)}.yaml"
        path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
        written.append(path)
    policy = out_dir / f"{prefix}-network-policy.yaml"
    policy.write_text(yaml.safe_dump(deny_all_network_policy(prefix, namespace), sort_keys=False))
    return [*written, policy]
