"""Run inside the keras3-jax environment by tests/test_keras_sync.py; prints one JSON object.

Measures device-slow steps three ways: the harness clock with the JAX backend's sync, the same clock
with no sync at all (what an unsynced harness would report), and a manual block_until_ready loop.

Load-proof: each measurement runs in ROUNDS rounds, alternating with its manual reference, and the
probe reports the median of the per-round ratios (clock / manual). Other load on the machine slows both
sides of a round alike, so the ratio holds on a busy machine where two separate timings would not.
"""

from __future__ import annotations

import json
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from fwbench.harness.backends import JaxBackend  # noqa: E402
from fwbench.harness.clock import StepClock, run_loop  # noqa: E402

STEPS, WARMUP = 4, 1
ROUNDS = 3


def manual_ms(fn, n=STEPS) -> float:
    jax.block_until_ready(fn())
    start = time.perf_counter()
    for _ in range(n):
        jax.block_until_ready(fn())
    return 1000 * (time.perf_counter() - start) / n


def clock_ms(sync, step) -> float:
    clock = StepClock(sync, WARMUP, STEPS)
    run_loop(clock, step)
    return clock.ms_per_step()


def paired_ratio(measure, reference) -> tuple[float, float, float]:
    """Median over ROUNDS of measure() / reference(), each round back to back; also both medians (ms)."""
    pairs = [(measure(), reference()) for _ in range(ROUNDS)]
    return (float(np.median([m / r for m, r in pairs])), float(np.median([m for m, _ in pairs])),
            float(np.median([r for _, r in pairs])))


def raw_jax() -> dict:
    @jax.jit
    def chain(x):
        for _ in range(6):  # device work only: a chain of large matmuls
            x = jnp.tanh(x @ x) * 0.01
        return x

    x = jnp.asarray(np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32))
    step = lambda: chain(x)  # noqa: E731 - returns without blocking
    jax.block_until_ready(step())  # compile outside every measurement
    backend = JaxBackend()
    manual = lambda: manual_ms(step)  # noqa: E731
    synced_ratio, synced, manual_synced = paired_ratio(lambda: clock_ms(backend.sync, step), manual)
    unsynced_ratio, unsynced, _ = paired_ratio(lambda: clock_ms(lambda _: None, step), manual)
    return {"synced_ratio": synced_ratio, "unsynced_ratio": unsynced_ratio, "synced_ms": synced,
            "unsynced_ms": unsynced, "manual_ms": manual_synced}


def keras_fit_and_predict() -> dict:
    import keras

    from fwbench.workloads.keras.common import FitCell, PredictCell

    def model():
        m = keras.Sequential([keras.Input((1024,))] + [keras.layers.Dense(1024, activation="tanh")
                                                       for _ in range(6)])
        m.compile(optimizer="adam", loss="mse", jit_compile=True)
        return m

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 1024), dtype=np.float32)
    y = rng.standard_normal((1024, 1024), dtype=np.float32)
    backend = JaxBackend()
    out = {}
    fit_model = model()

    def fit_clock_ms() -> float:
        clock = StepClock(backend.sync, WARMUP, STEPS)
        FitCell(fit_model, x, y, clock.total_steps).drive(clock)
        return clock.ms_per_step()

    # Reference: Keras's own train step, run until its result is on the host.
    out["fit_ratio"], out["fit_clock_ms"], out["fit_manual_ms"] = paired_ratio(
        fit_clock_ms, lambda: manual_ms(lambda: fit_model.train_on_batch(x, y)))
    # For information: the same callbacks with no sync (does Keras itself hand over host values?).
    clock = StepClock(lambda _: None, WARMUP, STEPS)
    FitCell(model(), x, y, clock.total_steps).drive(clock)
    out["fit_unsynced_ms"] = clock.ms_per_step()
    predict_model = model()

    def predict_clock_ms() -> float:
        clock = StepClock(backend.sync, WARMUP, STEPS)
        PredictCell(predict_model, x, clock.total_steps).drive(clock)
        return clock.ms_per_step()

    out["predict_ratio"], out["predict_clock_ms"], out["predict_manual_ms"] = paired_ratio(
        predict_clock_ms, lambda: manual_ms(lambda: predict_model.predict_on_batch(x)))
    return out


if __name__ == "__main__":
    print(json.dumps({**raw_jax(), **keras_fit_and_predict()}))
