"""`fwbench k8s render` objects, validated offline against the Kubernetes API models of the official client."""

from __future__ import annotations

import json

import kubernetes  # in the test extra
import pytest
import yaml

from fwbench.cluster import cellplan, k8s
from fwbench.engines import matrix
from fwbench.core.spec import CellSpec

IMAGE = "ghcr.io/o/fwbench/keras3-jax@sha256:" + "ab" * 32


def deserialize(document: dict, kind: str):
    """The client's own models: a missing required field or a wrong type raises. They drop unknown fields
    silently, so the model is serialized back and must equal the document: a misspelled field fails too."""
    client = kubernetes.client.ApiClient()
    model = client._ApiClient__deserialize(document, kind)
    assert client.sanitize_for_serialization(model) == document, f"{kind}: a field the API does not know"
    return model


def test_the_validation_itself_refuses_typos_wrong_types_and_missing_fields():
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    deserialize(job, "V1Job")
    with pytest.raises(AssertionError, match="does not know"):
        deserialize({**job, "spec": {**job["spec"], "completionMod": "Indexed"}}, "V1Job")
    with pytest.raises(Exception, match="validation error"):
        deserialize({**job, "spec": {**job["spec"], "parallelism": "two"}}, "V1Job")
    with pytest.raises(Exception, match="validation error"):
        deserialize({"apiVersion": "batch/v1", "kind": "Job", "spec": {"completions": 1}}, "V1Job")


def specs():
    base = CellSpec(stack="", task="", preset="tiny", compile_mode="", data_dir="/d", steps=5, threads=4)
    return matrix.plan(["keras3-jax"], ["bert-predict", "bert-fit"], "tiny", None, 2, base=base)


def test_rendered_objects_are_valid_kubernetes_objects_with_the_required_properties(tmp_path):
    files = k8s.render(specs(), {"keras3-jax": IMAGE}, tmp_path, "fwbench-tiny", 2, results_claim="fwbench-results", gpu=True, namespace="bench")
    configmap, job = yaml.safe_load_all(files[0].read_text())
    policy = yaml.safe_load(files[1].read_text())
    job_model = deserialize(job, "V1Job")
    assert deserialize(configmap, "V1ConfigMap").metadata.name == "fwbench-tiny-keras3-jax"
    assert deserialize(policy, "V1NetworkPolicy").spec.policy_types == ["Ingress", "Egress"]
    spec = job_model.spec
    assert (spec.completion_mode, spec.completions, spec.parallelism) == ("Indexed", 4, 2)
    [container] = spec.template.spec.containers
    assert container.image == IMAGE and "@sha256:" in container.image
    assert container.resources.limits == {"nvidia.com/gpu": "1", "cpu": "8", "memory": "32Gi"}
    assert container.resources.requests == {"cpu": "8", "memory": "32Gi"}
    security = container.security_context
    assert security.run_as_non_root and security.read_only_root_filesystem and not security.allow_privilege_escalation
    volumes = {v.name: v for v in spec.template.spec.volumes}
    assert volumes["results"].persistent_volume_claim.claim_name == "fwbench-results"
    cells = json.loads(configmap["data"]["cells.json"])
    assert [c["task"] for c in cells] == ["bert-predict", "bert-predict", "bert-fit", "bert-fit"]
    assert {c["engine"] for c in cells} == {"current"} and {c["data_dir"] for c in cells} == {"/data"}


def test_each_completion_index_reads_its_own_cell(tmp_path):
    files = k8s.render(specs(), {"keras3-jax": IMAGE}, tmp_path, "r", 1, results_claim="c", gpu=False, namespace=None)
    configmap, job = yaml.safe_load_all(files[0].read_text())
    assert "nvidia.com/gpu" not in job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    plan = tmp_path / "cells.json"
    plan.write_text(configmap["data"]["cells.json"])
    assert (cellplan.cell_of_index(plan, 3).task, cellplan.cell_of_index(plan, 3).repeat) == ("bert-fit", 1)
    with pytest.raises(ValueError, match="outside the plan's 4 cells"):
        cellplan.cell_of_index(plan, 4)


def test_render_command_writes_the_objects_of_a_release_and_refuses_bad_input(tmp_path):
    from fwbench.release.record import Release, ReleasedImage
    from tests.conftest import run_fwbench

    image = ReleasedImage(stack="keras3-jax", variant="gpu", pin_set="current", repository="ghcr.io/o/fwbench/keras3-jax",
                          tag="current-gpu", digest="sha256:" + "ab" * 32, image_id="sha256:" + "0" * 64,
                          lock_sha256="", sbom_sha256="", base_image="", base_image_digest=None, git_revision="")
    release = tmp_path / "release.json"
    release.write_text(Release("ghcr.io/o", "0.1.0", "rev", "now", [image]).to_json())
    done = run_fwbench("k8s", "render", "--stack", "keras3-jax", "--task", "bert-fit", "--preset", "paper",
                       "--release", str(release), "-o", str(tmp_path / "k8s"))
    assert done.returncode == 0, done.stderr
    configmap, job = yaml.safe_load_all((tmp_path / "k8s" / "fwbench-keras3-jax.yaml").read_text())
    assert deserialize(job, "V1Job").spec.template.spec.containers[0].image == image.reference
    assert json.loads(configmap["data"]["cells.json"])[0]["preset"] == "paper"
    for args, says in ((["--name", "Bad_Name"], "not a DNS-1123 label"), (["--stack", "native-torch"], "has no native-torch"),
                       (["--memory", "32 GB"], "not a Kubernetes quantity"), (["--name", "a" * 64], "at most 63")):
        done = run_fwbench("k8s", "render", "--stack", "keras3-jax", "--release", str(release), "-o", str(tmp_path / "x"),
                           *args)
        assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr


def rendered_pod(tmp_path, gpu: bool = True) -> dict:
    files = k8s.render(specs(), {"keras3-jax": IMAGE}, tmp_path, "fwbench-tiny", 2, results_claim="fwbench-results", gpu=gpu, namespace="bench")
    _configmap, job = yaml.safe_load_all(files[0].read_text())
    return job["spec"]["template"]["spec"]


@pytest.mark.parametrize("gpu", [True, False])
def test_rendered_pods_are_admitted_under_pod_security_restricted(tmp_path, gpu):
    from tests.pod_security import violations

    pod = rendered_pod(tmp_path, gpu)
    assert violations(pod) == []
    [container] = pod["containers"]
    assert container["resources"]["requests"] == {"cpu": "8", "memory": "32Gi"}
    assert {v["name"]: v["emptyDir"].get("sizeLimit") for v in pod["volumes"] if "emptyDir" in v} == {
        "data": "16Gi", "tmp": "16Gi", "shm": "2Gi"}


@pytest.mark.parametrize("edit, says", [
    (lambda pod: pod.update(hostNetwork=True), "hostNetwork"),
    (lambda pod: pod.update(hostPID=True), "hostPID"),
    (lambda pod: pod["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), "hostPath"),
    (lambda pod: pod["containers"][0]["securityContext"].update(privileged=True), "privileged"),
    (lambda pod: pod["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True), "allowPrivilegeEscalation"),
    (lambda pod: pod["containers"][0]["securityContext"].update(runAsNonRoot=False), "runAsNonRoot"),
    (lambda pod: pod["securityContext"].update(runAsUser=0), "runAsUser"),
    (lambda pod: [c["securityContext"].pop("seccompProfile") for c in pod["containers"]]
     and pod["securityContext"].pop("seccompProfile"), "seccompProfile"),
    (lambda pod: pod["containers"][0]["securityContext"].update(seccompProfile={"type": "Unconfined"}), "seccompProfile"),
    (lambda pod: pod["containers"][0]["securityContext"].update(capabilities={"drop": []}), "drop ALL"),
    (lambda pod: pod["containers"][0]["securityContext"].update(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
     "beyond baseline"),
    (lambda pod: pod["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}]), "hostPort"),
    (lambda pod: pod["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}), "not allowed"),
])
def test_the_pod_security_check_itself_catches_each_violation(tmp_path, edit, says):
    from tests.pod_security import violations

    pod = rendered_pod(tmp_path)
    edit(pod)
    assert any(says in line for line in violations(pod)), violations(pod)


def test_long_names_stay_unique_and_valid_after_truncation(tmp_path):
    long_a, long_b = "a" * 50 + "-run-one", "a" * 50 + "-run-two"
    names = {k8s.object_name(prefix, stack) for prefix in (long_a, long_b)
             for stack in ("keras3-tensorflow", "keras2-tensorflow", "no-network")}
    assert len(names) == 6 and all(len(n) <= 63 and n[-1] != "-" for n in names)
    assert k8s.object_name("fwbench", "keras3-jax") == "fwbench-keras3-jax"  # short names unchanged
    files = k8s.render(specs(), {"keras3-jax": IMAGE}, tmp_path, "b" * 63, 1, results_claim="c", gpu=False, namespace=None)
    for document in yaml.safe_load_all(files[0].read_text()):
        assert len(document["metadata"]["name"]) <= 63


def test_bad_resource_quantities_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        k8s.render(specs(), {"keras3-jax": IMAGE}, tmp_path, "r", 1, results_claim="c", gpu=False, namespace=None,
                   resources=k8s.PodResources(memory="lots\nof: it"))


def test_a_model_files_cells_read_it_from_the_plan_configmap(tmp_path):
    """`fwbench k8s render --model FILE`: the file's bytes go into the plan ConfigMap (key model-<sha256[:16]>.py,
    mounted with the plan at /plan), and each cell names that path; a file edited after planning is refused."""
    import hashlib

    from fwbench.core import model_file
    from fwbench.engines import model_files
    from tests.conftest import REPO_ROOT

    source = tmp_path / "mlp.py"
    source.write_bytes((REPO_ROOT / "examples" / "mlp.py").read_bytes())
    sha256 = hashlib.sha256(source.read_bytes()).hexdigest()
    base = CellSpec(stack="", task="", preset="tiny", compile_mode="", data_dir="/d", steps=5, threads=4)
    planned = model_files.plan(model_file.read(source), ["keras3-jax"], ["predict", "fit"], 8, compile_modes=None,
                               repeats=1, base=base)
    files = k8s.render(planned, {"keras3-jax": IMAGE}, tmp_path / "k8s", "m", 1, results_claim="c", gpu=False,
                       namespace=None)
    configmap, job = yaml.safe_load_all(files[0].read_text())
    deserialize(configmap, "V1ConfigMap")
    key = f"model-{sha256[:16]}.py"
    assert set(configmap["data"]) == {"cells.json", key}
    assert configmap["data"][key] == source.read_text()
    cells = json.loads(configmap["data"]["cells.json"])
    assert [c["task"] for c in cells] == ["mlp.py-predict-bs8", "mlp.py-fit-bs8"]
    assert {(c["model_file"], c["model_sha256"]) for c in cells} == {(f"/plan/{key}", sha256)}
    mounts = job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "plan", "mountPath": "/plan", "readOnly": True} in mounts
    source.write_text(source.read_text() + "# edited\n")
    with pytest.raises(ValueError, match="changed while the cells were planned"):
        k8s.render(planned, {"keras3-jax": IMAGE}, tmp_path / "k8s2", "m", 1, results_claim="c", gpu=False,
                   namespace=None)
    assert {cell.model_file for cell in planned} == {str(source.resolve())}  # the plan itself is left as it was
