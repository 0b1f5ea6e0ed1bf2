"""Data-parallel scaling as an axis (--devices, --global-batch): identity, old rows, file names, batches, and the
unsupported rows of tasks and stacks that have no data-parallel variant. No framework runs here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from fwbench.core import data, registry, results, scaling
from fwbench.core.identity import CellIdentity, file_tokens
from fwbench.core.schema import ADDED_IN, COLUMN_NAMES, SCHEMA_VERSION
from fwbench.core.spec import CellSpec
from fwbench.harness import cell, ranks


def spec(**fields) -> CellSpec:
    return CellSpec("native-torch", "bert-fit", "tiny", "none", "/d", 5, **fields)


def test_devices_and_global_batch_are_identity_and_old_rows_read_as_one_device_weak_scaling():
    one, two, strong = spec(), spec(devices=2), spec(devices=2, global_batch=8)
    assert len({one.identity, two.identity, strong.identity}) == 3
    assert (two.identity.setting("devices"), strong.identity.setting("global_batch")) == (2, 8)
    # A row written before schema v9 has neither column: it is the one-device, weak-scaling cell.
    old_row = {"stack": "native-torch", "task": "bert-fit", "preset": "tiny", "compile_mode": "none",
               "timed_steps": 5, "warmup_steps": 2, "threads": 1, "per_step_sync": True, "data_seed": 0,
               "pin_set": "current", "jit_policy": "published", "image_variant": "venv"}
    assert CellIdentity.of_row(old_row) == one.identity
    assert CellIdentity.of_row({**old_row, "devices": 2}) == two.identity
    assert CellIdentity.of_row({**old_row, "devices": 2, "global_batch_setting": 8.0}) == strong.identity


def test_file_name_token_only_off_one_device():
    defaults = {"threads": 1, "warmup": 2, "steps": 5}
    assert not any(t.startswith(("devices-", "gbatch-")) for t in file_tokens(spec().identity, defaults))
    assert file_tokens(spec(devices=2, global_batch=8).identity, defaults) == ["devices-2", "gbatch-8"]
    path = results.readable_path(spec(devices=2), Path("/out"))
    assert ".devices-2." in path.name


def test_spec_json_leaves_one_device_out_and_reads_back():
    assert "devices" not in json.loads(spec().to_json()) and "global_batch" not in json.loads(spec().to_json())
    strong = spec(devices=4, global_batch=16)
    assert CellSpec.from_json(strong.to_json()) == strong


def test_schema_v9_adds_the_scaling_columns_and_v10_what_the_devices_talked_over():
    assert SCHEMA_VERSION >= 10  # later versions add columns of their own
    assert set(ADDED_IN[10]) == {"comm_backend_version", "interconnect"} and set(ADDED_IN[10]) <= set(COLUMN_NAMES)
    assert set(ADDED_IN[9]) == {"devices", "per_device_batch", "global_batch", "global_batch_setting", "comm_backend"}
    assert set(ADDED_IN[9]) <= set(COLUMN_NAMES)


@pytest.mark.parametrize("task_batch, devices, global_batch, expected", [
    (4, 1, None, (4, 4)), (4, 2, None, (4, 8)), (4, 2, 4, (2, 4)), (4, 4, 16, (4, 16))])
def test_weak_and_strong_batches(task_batch, devices, global_batch, expected):
    assert scaling.batches(task_batch, devices, global_batch) == expected


@pytest.mark.parametrize("devices, global_batch, message", [
    (0, None, "--devices must be an integer of at least 1"), (2, 3, "does not split evenly over --devices 2"),
    (2, 0, "--global-batch must be an integer of at least 1")])
def test_bad_scaling_is_one_line(devices, global_batch, message):
    with pytest.raises(ValueError, match=message):
        scaling.check(devices, global_batch)


def test_global_rows_are_distinct_copies_of_the_shared_batch():
    arrays = {"x": np.arange(6).reshape(3, 2), "y": np.array([0, 1, 2])}
    assert scaling.global_rows(arrays, 3)["x"].tolist() == arrays["x"].tolist()
    grown = scaling.global_rows(arrays, 6)
    assert grown["y"].tolist() == [0, 1, 2, 0, 1, 2]
    # The second copy's samples are the first's rotated by one position: distinct samples, the same data.
    assert grown["x"][:3].tolist() == [[0, 1], [2, 3], [4, 5]] and grown["x"][3:].tolist() == [[1, 0], [3, 2], [5, 4]]
    assert scaling.global_rows(arrays, 2)["y"].tolist() == [0, 1]


@pytest.mark.parametrize("stack, task, reason", [
    ("native-torch", "bert-predict", "data-parallel variants exist for fit tasks"),
    ("keras3-jax", "gemma-generate-bs32", "data-parallel variants exist for fit tasks"),
    ("keras3-torch", "bert-fit", "for the JAX and TensorFlow backends only"),
    ("keras3-torch", "sam-fit", "for the JAX and TensorFlow backends only"),
    # The model's own reason comes first: Keras 2 cannot run Gemma at all.
    ("keras2-tensorflow", "gemma-fit", "GemmaBackbone requires Keras 3"),
])
def test_no_data_parallel_variant_is_an_unsupported_row_with_the_reason(tmp_path, stack, task, reason):
    data.generate(tmp_path / "data", "tiny", 0, [task])
    compile_mode = registry.get_stack(stack).compile_modes[0]
    one = CellSpec(stack, task, "tiny", compile_mode, str(tmp_path / "data"), 2, devices=2)
    record_path = tmp_path / "record.json"
    # The reason is found before any framework is imported: this runs in the test's own interpreter.
    assert cell.run(one, record_path) == 0
    record = json.loads(record_path.read_text())
    assert record["status"] == "unsupported" and reason in record["error_message"], record["error_message"]
    assert record["devices"] == 2 and record["per_device_batch"] * 2 == record["global_batch"]


def test_every_fit_task_has_a_data_parallel_variant_on_every_stack_with_data_parallelism():
    fits = {task_id for task_id, task in registry.TASKS.items() if task.kind == "fit"}
    with_parallelism = [stack for stack in registry.STACKS.values() if stack.data_parallel is not None]
    assert len(with_parallelism) == 4 and len(fits) == 5
    for stack in with_parallelism:
        assert set(stack.data_parallel.tasks) == fits, stack.id
        for task_id in fits:
            assert scaling.unsupported_reason(stack.id, task_id, "fit", 2) is None, (stack.id, task_id)
        # A model file's fit too (docs/your-model.md); its predict, as every predict, has no data-parallel variant.
        assert scaling.unsupported_reason(stack.id, "my_model.py-fit-bs32", "fit", 2) is None, stack.id
        assert scaling.NOT_A_FIT in scaling.unsupported_reason(stack.id, "my_model.py-predict-bs32", "predict", 2)
    assert "keras.distribution" in scaling.unsupported_reason("keras3-torch", "my_model.py-fit-bs32", "fit", 2)


def test_one_device_has_no_unsupported_reason():
    assert scaling.unsupported_reason("keras3-torch", "bert-predict", "predict", 1) is None


def test_a_global_batch_on_one_device_needs_the_data_parallel_variant(tmp_path):
    # Otherwise the row would record a global batch the workload never ran (a predict runs the task's batch).
    data.generate(tmp_path / "data", "tiny", 0, ["bert-predict"])
    one = CellSpec("native-torch", "bert-predict", "tiny", "none", str(tmp_path / "data"), 2, global_batch=64)
    assert cell.run(one, tmp_path / "record.json") == 0
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["status"] == "unsupported" and "--devices 1 --global-batch 64: data-parallel variants exist for fit" \
        in record["error_message"]
    assert scaling.unsupported_reason("native-torch", "bert-fit", "fit", 1, 64) is None


def test_rank_cores_are_equal_disjoint_shares_or_shared_when_too_few():
    assert ranks.core_shares([0, 1, 2, 3, 4], 2) == [[0, 1], [2, 3]]  # the remainder idles: no rank has more
    assert ranks.core_shares([0], 2) == [[0], [0]]


def test_the_row_is_timed_as_the_slowest_rank():
    fields = [{"ms_per_step": 10.0, "step_ms": [9.0, 11.0], "first_step_s": 1.0, "setup_s": 2.0, "extra": {"a": 1},
               "busy": False, "cpu_set": "0"},
              {"ms_per_step": 12.0, "step_ms": [12.0, 10.0], "first_step_s": 0.5, "setup_s": 3.0, "busy": True,
               "busy_reasons": "other processes", "cpu_set": "1"}]
    merged = ranks.merge(fields, global_batch=8)
    assert (merged["ms_per_step"], merged["step_ms"], merged["setup_s"]) == (12.0, [12.0, 11.0], 3.0)
    assert merged["samples_per_s"] == pytest.approx(8 * 1000 / 12.0)
    assert merged["busy"] and merged["busy_reasons"] == "rank 1: other processes"
    assert merged["extra"]["rank_ms_per_step"] == [10.0, 12.0] and merged["extra"]["a"] == 1
    assert "cpu_set" not in merged and merged["extra"]["rank_cpu_sets"] == ["0", "1"]  # the row keeps the cell's


def _failing_rank(spec_json, rank, *, world, port, cores, work_dir, results):
    if rank == 1:
        results.put((rank, "oom", "RuntimeError: out of memory"))
    else:
        results.put((rank, "ok", {"ms_per_step": 1.0}))


def _dying_rank(spec_json, rank, **_):
    import os

    os._exit(3)


def test_a_failing_or_dying_rank_fails_the_cell_with_its_status():
    with pytest.raises(ranks.RankFailed, match="rank 1 of 2: RuntimeError: out of memory") as failed:
        ranks.launch(_failing_rank, "{}", 2, work_dir="/tmp", timeout_s=60)
    assert failed.value.status == "oom" and cell.classify_failure(failed.value) == "oom"
    with pytest.raises(ranks.RankFailed, match="exited \\(code 3\\) without a result"):
        ranks.launch(_dying_rank, "{}", 2, work_dir="/tmp", timeout_s=60)


def test_verify_reruns_a_published_scaling_cell_at_its_devices_and_refuses_absurd_ones(tmp_path):
    import pandas as pd

    from fwbench.release import verify
    from fwbench.release.bundle import VerificationRefused

    base = {"status": "ok", "image_digest": "r/fwbench/native-torch@sha256:" + "0" * 64, "stack": "native-torch",
            "task": "bert-fit", "preset": "tiny", "compile_mode": "none", "pin_set": "current",
            "jit_policy": "published", "precision": "published", "tf32_setting": "default", "threads": 2,
            "warmup_steps": 2, "timed_steps": 5, "per_step_sync": True, "data_seed": 0}
    frame = pd.DataFrame([{**base, "devices": None, "global_batch_setting": None},  # an older row: one device
                          {**base, "devices": 2, "global_batch_setting": None},
                          {**base, "devices": 2, "global_batch_setting": 8}])
    verify.check_published_settings(frame, 1)
    specs = sorted((s.devices, s.global_batch or 0) for _, s in verify.published_specs(frame, None, 1, tmp_path))
    assert specs == [(1, 0), (2, 0), (2, 8)]
    with pytest.raises(VerificationRefused, match="devices = 1000"):
        verify.check_published_settings(frame.assign(devices=1000), 1)


def test_a_rank_does_not_count_its_launcher_as_a_competing_cell(monkeypatch):
    import subprocess
    import sys

    from fwbench.harness import contention

    # The launcher is a cell process (its command line names the cell module) that only waits for its ranks.
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "fwbench.harness.cell"])
    try:
        import time

        deadline = time.time() + 10
        while launcher.pid not in contention.other_cells() and time.time() < deadline:
            time.sleep(0.05)  # until its command line is readable
        assert launcher.pid in contention.other_cells()
        monkeypatch.setenv(ranks.LAUNCHER_ENV, str(launcher.pid))
        assert launcher.pid not in contention.other_cells()
    finally:
        launcher.kill()
        launcher.wait()


def _report_launcher(spec_json, rank, *, world, port, cores, work_dir, results):
    results.put((rank, "ok", {"launcher": os.environ.get(ranks.LAUNCHER_ENV), "own": os.getpid()}))


def test_ranks_know_their_launchers_pid_not_their_own(tmp_path):
    # Each rank excludes its launcher from the competing cells by this pid: with its own pid there, every
    # data-parallel row was flagged busy by its own launcher.
    fields = ranks.launch(_report_launcher, "{}", 2, work_dir=str(tmp_path), timeout_s=60)
    assert [f["launcher"] for f in fields] == [str(os.getpid())] * 2
    assert all(f["own"] != os.getpid() for f in fields)


def test_reported_extra_fields_are_merged_not_replaced():
    # The data-parallel description (reported before the model is built) must survive report_model's own extra.
    from fwbench.workloads import CellContext

    ctx = CellContext(spec=spec(), workload=registry.workload("bert-fit", "tiny"), arrays={}, backend=None)
    ctx.report(comm_backend="gloo", extra={"data_parallel": "2 ranks"})
    ctx.report(params_total=1, extra={"input_pipeline": "tf.data"})
    assert ctx.reported["extra"] == {"data_parallel": "2 ranks", "input_pipeline": "tf.data"}


def test_a_spec_with_impossible_scaling_is_an_error_row_not_a_crash(tmp_path):
    bad = CellSpec("native-torch", "bert-fit", "tiny", "none", str(tmp_path), 2, devices=2, global_batch=3)
    assert cell.run(bad, tmp_path / "record.json") == 1
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["status"] == "error" and "does not split evenly" in record["error_message"]


def test_an_unsupported_keras2_scaling_row_names_the_keras_it_runs(monkeypatch):
    """The current pin set's Keras 2 stack has tf-keras beside an unused keras 3: the row named keras 3.15.1."""
    from fwbench.harness import cell

    versions = {"tf-keras": "2.20.1", "keras": "3.15.1"}
    monkeypatch.setattr(cell, "_installed", lambda name: versions.get(name, "not installed"))
    assert cell._keras_installed(2) == "tf-keras 2.20.1"
    assert cell._keras_installed(3) == "Keras 3.15.1"
    versions.pop("tf-keras")  # TensorFlow 2.15 (paper-2024) bundles Keras 2 as `keras`
    versions["keras"] = "2.15.0"
    assert cell._keras_installed(2) == "Keras 2.15.0"


def test_a_model_files_data_parallel_fit_runs_as_ranks_on_native_torch_and_in_one_process_on_jax():
    from fwbench.harness import cell

    def spec(stack, task, devices):
        return CellSpec(stack, task, "tiny", registry.get_stack(stack).compile_modes[0], "/d", 5, devices=devices)

    assert cell.in_processes(spec("native-torch", "my_model.py-fit-bs32", 2))
    assert not cell.in_processes(spec("native-torch", "my_model.py-fit-bs32", 1))
    assert not cell.in_processes(spec("native-torch", "my_model.py-predict-bs32", 2))  # unsupported: not a fit
    assert not cell.in_processes(spec("keras3-jax", "my_model.py-fit-bs32", 2))  # one process drives N devices
