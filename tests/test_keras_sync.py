"""JAX dispatch is asynchronous (on the CPU too): prove the harness times device work, not dispatch.

The probe runs in the real keras3-jax environment (the test interpreter has no frameworks). Its steps
are device-heavy and return without blocking; the clock with the JAX backend's sync must report about
the manually blocked time, while the same clock without a sync reports (almost) nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fwbench.engines import cell_environment
from fwbench.engines.local import StackEnvironment, with_this_checkout
from fwbench.core.spec import CellSpec

pytestmark = pytest.mark.integration

PROBE = Path(__file__).with_name("keras_jax_sync_probe.py")


@pytest.fixture(scope="module")
def probe() -> dict:
    environment = StackEnvironment("keras3-jax")
    environment.build()
    spec = CellSpec(stack="keras3-jax", task="bert-fit", preset="tiny", compile_mode="xla", data_dir="",
                    steps=1, threads=os.cpu_count() or 1)
    done = subprocess.run([str(environment.python), str(PROBE)], capture_output=True, text=True,
                          timeout=900, env=with_this_checkout(cell_environment(spec)))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_unsynced_dispatch_is_much_faster_than_the_work(probe):
    # Without this the test below would prove nothing: the step really is asynchronous.
    assert probe["unsynced_ratio"] < 0.2, probe


def test_harness_clock_reports_device_time(probe):
    assert 0.5 < probe["synced_ratio"] < 2.0, probe  # paired rounds: load slows both sides alike


def test_keras_fit_and_predict_callbacks_are_synced(probe):
    assert 0.5 < probe["fit_ratio"] < 2.0, probe
    assert 0.5 < probe["predict_ratio"] < 2.0, probe
