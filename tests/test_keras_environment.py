"""How the engines prepare a Keras cell's process (no framework needed)."""

from __future__ import annotations

import pytest

from fwbench.engines import cell_environment
from fwbench.harness import backends
from fwbench.harness.cell import base_record
from fwbench.core.spec import CellSpec


def spec(stack: str) -> CellSpec:
    return CellSpec(stack=stack, task="bert-fit", preset="tiny", compile_mode="xla", data_dir="/d", steps=1)


@pytest.mark.parametrize("stack, backend", [("keras3-tensorflow", "tensorflow"), ("keras3-jax", "jax"),
                                            ("keras3-torch", "torch")])
def test_keras3_backend_is_chosen_before_import(stack, backend, monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "something-else")
    env = cell_environment(spec(stack))
    assert env["KERAS_BACKEND"] == backend
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert "TF_USE_LEGACY_KERAS" not in env


def test_keras2_uses_legacy_keras_and_no_backend_switch(monkeypatch):
    # KerasNLP/KerasCV 0.8 would switch to multi-backend keras_core if KERAS_BACKEND were set.
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    env = cell_environment(spec("keras2-tensorflow"))
    assert "KERAS_BACKEND" not in env and env["TF_USE_LEGACY_KERAS"] == "1"


def test_native_torch_gets_no_keras_switches(monkeypatch):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    env = cell_environment(spec("native-torch"))
    assert "KERAS_BACKEND" not in env and "TF_USE_LEGACY_KERAS" not in env


@pytest.mark.parametrize("stack, jit", [("keras3-tensorflow", True), ("keras3-jax", True),
                                        ("keras2-tensorflow", True), ("keras3-torch", False)])
def test_every_keras_row_records_jit_compile(stack, jit):
    assert base_record(spec(stack))["jit_compile"] is jit


def test_native_torch_rows_have_no_jit_compile():
    assert "jit_compile" not in base_record(spec("native-torch"))


def test_sync_sees_every_leaf_of_keras_logs():
    assert backends._leaves({"loss": 1, "outputs": [2, (3, None)]}) == [1, 2, 3]
    assert backends._leaves(None) == []


def test_unknown_stack_has_no_backend():
    with pytest.raises(NotImplementedError):
        backends.backend_for("no-such-stack")


@pytest.mark.parametrize("task, policy, jit", [("sam-predict", "published", False), ("stable_diffusion-fit", "published", False),
                                               ("sam-fit", "published", True), ("sam-predict", "on", True),
                                               ("bert-fit", "off", False)])
def test_keras2_rows_record_the_jit_compile_the_cell_uses(task, policy, jit):
    row = base_record(CellSpec(stack="keras2-tensorflow", task=task, preset="tiny", compile_mode="xla",
                               data_dir="/d", steps=1, jit=policy))
    assert row["jit_compile"] is jit and row["jit_policy"] == policy


def test_a_cell_records_the_thread_variables_its_engine_set_and_the_collectors_state(monkeypatch):
    """Issue 40: the row says what the process ran under beyond the identity (the thread pools' variables, the
    garbage collector), read in the cell process, so that a plain script can be set up the same way."""
    import gc

    from fwbench.harness.cell import process_settings

    env = cell_environment(CellSpec(stack="native-torch", task="bert-fit", preset="tiny", compile_mode="none",
                                    data_dir="/d", steps=1, threads=3))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        settings = process_settings()
    finally:
        if was_enabled:
            gc.enable()
    assert settings["thread_variables"] == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3",
                                            "TF_NUM_INTRAOP_THREADS": "3", "TF_NUM_INTEROP_THREADS": "1"}
    assert settings["gc"] == {"enabled": False, "thresholds": list(gc.get_threshold()),
                              "frozen_objects": gc.get_freeze_count()}
