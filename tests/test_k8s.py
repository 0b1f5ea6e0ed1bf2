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
    return matrix.plan(["keras3-jax"], ["bert-predict", "bert-fit"], "tiny", None, 2, base)


def test_rendered_objects_are_valid_kubernetes_objects_with_the_required_properties(tmp_path):
    files = k8s.render(specs(), {"keras3-jax": IMAGE}, tmp_path, "fwbench-tiny", 2, "fwbench-results", True, "bench")
    configmap, job = yaml.safe_load_all(files[0].read_text())
    policy = yaml.safe_load(files[1].read_text())
    job_model = deserialize(job, "V1Job")
    assert deserialize(configmap, "V1ConfigMap").metadata.name == "fwbench-tiny-keras3-jax"
    assert deserialize(policy, "V1NetworkPolicy").spec.policy_types == ["Ingress", "Egress"]
    spec = job_model.spec
    assert (spec.completion_mode, spec.completions, spec.parallelism) == ("Indexed", 4, 2)
    [container] = spec.template.spec.containers
    assert container.image == IMAGE and "@sha256:" in container.image
    assert container.resources.limits == {"nvidia.com/gpu": "1"}
    security = container.security_context
    assert security.run_as_non_root and security.read_only_root_filesystem and not security.allow_privilege_escalation
    volumes = {v.name: v for v in spec.template.spec.volumes}
    assert volumes["results"].persistent_volume_claim.claim_name == "fwbench-results"
    cells = json.loads(configmap["data"]["cells.json"])
    assert [c["task"] for c in cells] == ["bert-predict", "bert-predict", "bert-fit", "bert-fit"]
    assert {c["engine"] for c in cells} == {"current"} and {c["data_dir"] for c in cells} == {"/data"}


def test_each_completion_index_reads_its_own_cell(tmp_path):
    files = k8s.render(specs(), {"keras3-jax": IMAGE}, tmp_path, "r", 1, "c", False, None)
    configmap, job = yaml.safe_load_all(files[0].read_text())
    assert "resources" not in job["spec"]["template"]["spec"]["containers"][0]
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
    done = run_fwbench("k8s", "render", "--stack", "keras3-jax", "--task", "bert-fit", "--release", str(release),
                       "-o", str(tmp_path / "k8s"))
    assert done.returncode == 0, done.stderr
    configmap, job = yaml.safe_load_all((tmp_path / "k8s" / "fwbench-keras3-jax.yaml").read_text())
    assert deserialize(job, "V1Job").spec.template.spec.containers[0].image == image.reference
    assert json.loads(configmap["data"]["cells.json"])[0]["preset"] == "paper"
    for args, says in ((["--name", "Bad_Name"], "not a DNS-1123 label"), (["--stack", "native-torch"], "has no native-torch")):
        done = run_fwbench("k8s", "render", "--stack", "keras3-jax", "--release", str(release), "-o", str(tmp_path / "x"),
                           *args)
        assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
