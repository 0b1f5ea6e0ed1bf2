"""The rotation of the slow integration matrices (tests/rotation.py)."""

from __future__ import annotations

import pytest

from tests import rotation

STACKS = ["keras3-tensorflow", "keras3-jax", "keras3-torch", "keras2-tensorflow", "native-torch"]


def test_every_stack_runs_within_as_many_commits_as_there_are_rotating_stacks(monkeypatch):
    always = ("native-torch",)

    def at(index: int, per_run: int) -> list[str]:
        monkeypatch.setenv(rotation.VARIABLE, str(index))
        return rotation.rotated(STACKS, always=always, per_run=per_run)

    runs = [at(index, 1) for index in range(4)]
    assert all(len(run) == 2 and "native-torch" in run for run in runs)
    assert set().union(*runs) == set(STACKS)
    assert all(run == [stack for stack in STACKS if stack in run] for run in runs)  # the matrix's order kept
    two = at(3, 2)
    assert two == ["keras3-tensorflow", "keras2-tensorflow", "native-torch"]


def test_a_rotated_part_comes_up_after_every_stack_ran_the_one_before(monkeypatch):
    parts = (("a", "b"), ("c",))
    picked = []
    for index in range(8):
        monkeypatch.setenv(rotation.VARIABLE, str(index))
        picked.append((rotation.rotated(STACKS[:4], per_run=1)[0], tuple(rotation.rotated_part(parts, turn=4))))
    assert [part for _, part in picked] == [("a", "b")] * 4 + [("c",)] * 4
    assert set(picked) == {(stack, part) for stack in STACKS[:4] for part in parts}
    monkeypatch.setenv(rotation.VARIABLE, "all")
    assert rotation.rotated_part(parts, turn=4) == ["a", "b", "c"]


def test_all_or_a_number_in_the_environment_overrides_the_commit(monkeypatch):
    monkeypatch.setenv(rotation.VARIABLE, "all")
    assert rotation.rotation_index() is None and rotation.rotated(STACKS, per_run=1) == STACKS
    monkeypatch.setenv(rotation.VARIABLE, "6")
    assert rotation.rotated(STACKS, per_run=1) == ["keras3-jax"]  # 6 % 5
    monkeypatch.setenv(rotation.VARIABLE, "most")
    with pytest.raises(ValueError, match="expected 'all' or an integer"):
        rotation.rotation_index()
    monkeypatch.delenv(rotation.VARIABLE)
    assert isinstance(rotation.rotation_index(), int)  # the commit's (0 outside git)


def test_the_rotating_fixtures_keep_what_they_need_every_run():
    from tests import test_keras_stacks, test_precision, test_scaling_equivalence, test_stability

    every = rotation.rotation_index() is None  # FWBENCH_TEST_ROTATION=all
    assert len(test_keras_stacks.FULL_MATRIX) == (4 if every else 1)
    matrix = set(test_keras_stacks.MATRIX_TASKS)
    assert matrix == set(test_keras_stacks.RUN_TASKS) if every else len(matrix) == 6
    assert "native-torch" in test_precision.PRECISION_STACKS
    assert len(test_precision.PRECISION_STACKS) == (5 if every else 2)
    assert set(test_stability.OTHER_SEED_STACKS) < set(test_stability.SEEDED_STACKS)
    assert len(test_stability.SEEDED_STACKS) == (4 if every else 3)
    scaling = test_scaling_equivalence.SCALING_STACKS
    assert {"native-torch", "keras3-jax"} <= set(scaling)  # the two data-parallel paths that are not MirroredStrategy
    assert len(set(scaling) & set(test_scaling_equivalence.TF_STACKS)) == (2 if every else 1)
