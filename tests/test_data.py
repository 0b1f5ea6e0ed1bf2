"""Shared synthetic data: deterministic, verified, shaped per the registry."""

import json

import numpy as np
import pytest

from fwbench.core import data, registry


def test_every_task_has_data_of_the_registry_sizes(tmp_path):
    manifest = data.generate(tmp_path, "tiny")
    assert set(manifest["tasks"]) == set(registry.TASKS)
    for task_id in registry.TASKS:
        arrays, digest, seed = data.load(tmp_path, "tiny", task_id)
        wl = registry.workload(task_id, "tiny")
        assert digest == manifest["tasks"][task_id]["sha256"] and seed == 0
        assert all(a.shape[0] == wl.batch_size for a in arrays.values())
        if "token_ids" in arrays:
            assert arrays["token_ids"].max() < wl.arch.vocab_size
            assert arrays["token_ids"].dtype == np.int32


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a = data.generate(tmp_path / "a", "tiny", seed=0)
    b = data.generate(tmp_path / "b", "tiny", seed=0)
    c = data.generate(tmp_path / "c", "tiny", seed=1)
    assert a["tasks"] == b["tasks"]
    assert a["tasks"]["bert-fit"]["sha256"] != c["tasks"]["bert-fit"]["sha256"]


def test_generation_lengths_at_paper_preset():
    wl = registry.workload("gemma-generate-bs32", "paper")
    arrays = data.task_arrays(wl.task.id, "paper", 0)
    assert wl.batch_size == wl.task.published_batch == 32  # the published table's batch
    assert arrays["token_ids"].shape == (wl.batch_size, wl.shapes.prompt_len)
    sam = registry.workload("sam-fit", "tiny")
    embeddings = data.task_arrays("sam-fit", "tiny", 0)["target_embeddings"]
    assert embeddings.shape == (sam.batch_size, sam.arch.grid, sam.arch.grid, sam.arch.prompt_dim)
    assert sam.arch.grid == sam.arch.image_size // sam.arch.patch_size


def test_corrupt_file_is_detected(tmp_path):
    data.generate(tmp_path, "tiny", tasks=["bert-predict"])
    path = tmp_path / "tiny" / "bert-predict" / "token_ids.npy"
    payload = bytearray(path.read_bytes())
    payload[-1] ^= 0xFF
    path.write_bytes(bytes(payload))
    with pytest.raises(data.DataError, match="SHA-256"):
        data.load(tmp_path, "tiny", "bert-predict")


def test_missing_task_and_missing_manifest(tmp_path):
    with pytest.raises(data.DataError, match="cannot read"):
        data.load(tmp_path, "tiny", "bert-fit")
    data.generate(tmp_path, "tiny", tasks=["bert-fit"])
    with pytest.raises(data.DataError, match="no data for task"):
        data.load(tmp_path, "tiny", "sam-fit")
    assert data.has_task(tmp_path, "tiny", "bert-fit", 0)
    assert not data.has_task(tmp_path, "tiny", "bert-fit", 1)


def test_adding_tasks_keeps_earlier_ones(tmp_path):
    data.generate(tmp_path, "tiny", tasks=["bert-fit"])
    data.generate(tmp_path, "tiny", tasks=["sam-fit"])
    manifest = json.loads((tmp_path / "tiny" / "manifest.json").read_text())
    assert set(manifest["tasks"]) == {"bert-fit", "sam-fit"}
