"""One table of axes (issue 49): an axis declared in fwbench.core.axes.AXES, and nowhere else, is in the cell identity,
the file names, --resume's reading of older rows, labels, compare's --across, verify's keys, the command line's
options (fwbench.cli.options.matrix_options) and the cell spec (CellSpec.axis_settings)."""

from __future__ import annotations

import dataclasses

import pytest
import typer
from typer.testing import CliRunner

from fwbench.cli import options as matrix
from fwbench.core import axes, identity, results
from fwbench.core.spec import CellSpec
from fwbench.core.usage import UsageError


def _knob(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 9:
        raise ValueError(f"must be 0 to 9, got {value}")
    return value


@pytest.fixture
def toy_axis(monkeypatch):
    """A toy axis with its option, declared in the table alone (the test's only change), derived again after it is
    gone."""
    toy = axes.Axis("toy_knob", "toy_knob", "toy_knob", default=0, token="toy-{}", read_old=lambda row: 0,
                    label="knob", bounds=(0, 9), option=axes.AxisOption("A toy knob, 0 to 9.", parse=_knob))
    monkeypatch.setattr(axes, "AXES", [*axes.AXES, toy])
    identity.rebuild()
    yield toy
    monkeypatch.undo()
    identity.rebuild()


def spec_with(knob: int | None, **fields) -> CellSpec:
    """A real CellSpec with the toy knob set (None: not set, the axis's default)."""
    settings = () if knob is None else (("toy_knob", knob),)
    return CellSpec(stack="native-torch", task="bert-fit", preset="tiny", compile_mode="none", data_dir="/d",
                    steps=20, axis_settings=settings, **fields)


def test_a_toy_axis_declared_in_the_table_alone_reaches_every_consumer(toy_axis, tmp_path):
    from fwbench.release import verify
    from fwbench_aggregator import compare
    from fwbench_aggregator.variants import Variant

    default, knob3 = spec_with(None), spec_with(3)
    assert default.identity.setting("toy_knob") == 0 and spec_with(0).identity == default.identity
    assert default.identity != knob3.identity and knob3.identity.setting("toy_knob") == 3  # identity
    assert default.identity.settings_id != knob3.identity.settings_id
    assert CellSpec.from_json(knob3.to_json()) == knob3  # the cell process reads it from the spec's JSON
    assert "axis_settings" not in default.to_json()  # a spec without it reads as before (older harnesses)
    assert ".toy-3." in results.readable_path(knob3, tmp_path).name  # file names
    assert ".toy-" not in results.readable_path(default, tmp_path).name
    old_row = {"stack": "native-torch", "task": "bert-fit", "preset": "tiny", "compile_mode": "none",
               **{column: getattr(default, attribute) for column, attribute in identity.SETTINGS.values()
                  if column != "toy_knob"}}
    assert identity.CellIdentity.of_row(old_row) == default.identity  # a row without the column reads as measured
    assert axes.upgrade(old_row)["toy_knob"] == 0
    assert Variant("native-torch", "none", (("toy_knob", 3),)).label == "native-torch [none, knob=3]"  # labels
    assert compare.across_settings(["toy_knob"]) == frozenset({"toy_knob"})  # --across
    assert "toy_knob" in identity.differing_settings(knob3.identity, set()).__repr__()
    assert verify.spec_key(knob3.identity) != verify.spec_key(default.identity)  # verify's keys
    # verify re-runs a published row at its knob: the spec it plans carries the axis it has no field for.
    import pandas as pd

    published = {**old_row, "toy_knob": 3, "status": "ok", "image_digest": "registry/fwbench@sha256:1"}
    [(_, rerun)] = verify.published_specs(pd.DataFrame([published]), None, 1, tmp_path)
    assert rerun.identity.setting("toy_knob") == 3 and dict(rerun.axis_settings) == {"toy_knob": 3}


def test_a_toy_axis_declared_in_the_table_alone_is_an_option_of_the_matrix_commands(toy_axis):
    """A command given the matrix options after the axis is declared takes --toy-knob, and its plan's cells have it."""
    probe, taken = typer.Typer(), []

    @probe.command()
    @matrix.matrix_options()
    def probe_cmd(options: matrix.MatrixOptions) -> None:
        """A probe."""
        taken.append(options)

    assert list(matrix.table_axes()) == ["toy_knob"]  # no MatrixOptions field: the table's option
    runner = CliRunner()
    result = runner.invoke(probe, ["--stack", "native-torch", "--task", "bert-fit", "--toy-knob", "3"])
    assert result.exit_code == 0, result.output
    assert "--toy-knob" in runner.invoke(probe, ["--help"]).output
    assert taken[-1].axis_values == {"toy_knob": 3} == dataclasses.replace(taken[-1], repeats=2).axis_values
    specs = taken[-1].plan(taken[-1].base_spec(data_dir="/d", threads=1))
    assert specs and {spec.identity.setting("toy_knob") for spec in specs} == {3}
    assert {CellSpec.from_json(spec.to_json()).identity.setting("toy_knob") for spec in specs} == {3}
    result = runner.invoke(probe, ["--stack", "native-torch", "--task", "bert-fit"])  # not given: the axis default
    assert result.exit_code == 0, result.output
    assert taken[-1].base_spec(data_dir="/d", threads=1).identity.setting("toy_knob") == 0
    result = runner.invoke(probe, ["--stack", "native-torch", "--toy-knob", "12"])  # a bad value: a UsageError
    assert isinstance(result.exception, UsageError) and "--toy-knob" in str(result.exception)


def test_the_table_and_the_identity_agree():
    """Every axis is a setting with its column and spec field; the fixed defaults and tokens are the axes'."""
    assert list(identity.SETTINGS) == [axis.name for axis in axes.AXES]
    for axis in axes.AXES:
        assert identity.SETTINGS[axis.name] == (axis.column, axis.spec_field)
        # An axis with its option in the table (axes.AxisOption) may have no field: the spec's axis_settings holds it.
        assert axis.spec_field in {f.name for f in dataclasses.fields(CellSpec)} or axis.option is not None
    assert identity.FIXED_DEFAULTS["devices"] == 1 and "threads" not in identity.FIXED_DEFAULTS
    assert identity.SECTION_AXES == {"sweep": ("sweep_point",), "scaling": ("devices", "global_batch")}


def test_rows_of_older_schemas_are_upgraded_in_one_place():
    """A schema v6 row (TF32 as the precision axis, no devices or model file) reads as the current axes."""
    old = {"tf32_setting": "off", "device_name": "NVIDIA A100", "threads": 2.0, "data_seed": float("nan")}
    row = axes.upgrade(old)
    assert row["precision"] == "fp32" and row["device_model"] == "NVIDIA A100" and row["devices"] == 1
    assert row["steps_per_execution"] == 1 and row["model_sha256"] is None and row["threads"] == 2
    assert row["data_seed"] is None and axes.upgrade(row) == row  # idempotent


def test_the_docs_show_the_axes_table():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "results-schema.md").read_text()
    assert axes.markdown_table() in doc, "regenerate docs/results-schema.md's axes table: python -m fwbench.core.axes"


# Axes no option sets, with why: the engine fills them in, or a command of their own sets them.
NOT_AN_OPTION = {"image_variant": "the engine's image or environment", "device_model": "the host's device",
                 "sweep_point": "`fwbench sweep` sets each point"}


def test_every_settable_axis_is_one_option_whose_default_and_spec_field_are_the_axis():
    """The command line's options and the cell spec take an axis's default and field from the table: an option
    that sets an axis declares it (a MatrixOptions field, or the axis's option in the table), and one without an axis
    cannot set an identity setting of the spec."""
    options = matrix
    by_axis: dict[str, list[str]] = {}
    for option in dataclasses.fields(options.MatrixOptions):
        declared = options.declaration(option.name)
        if declared.axis is not None:
            by_axis.setdefault(declared.axis, []).append(option.name)
            axis = axes.by_name()[declared.axis]
            assert option.default == (None if axis.default is axes.HOST else axis.default) or declared.axis == "pin_set"
            assert declared.spec_field in (None, axis.spec_field), option.name
        else:
            assert declared.spec_field not in {axis.spec_field for axis in axes.AXES}, option.name
    for name in options.table_axes():
        by_axis.setdefault(name, []).append(f"--{name}")
    settable = [axis.name for axis in axes.AXES if axis.name not in NOT_AN_OPTION]
    assert {name: len(found) for name, found in by_axis.items()} == {name: 1 for name in settable}
    spec_defaults = {f.name: f.default for f in dataclasses.fields(CellSpec)}
    for axis in axes.AXES:
        if axis.default is not axes.HOST and axis.name not in options.table_axes():
            assert spec_defaults[axis.spec_field] == axis.default, axis.name
    # A plain run's base spec holds every axis at its default.
    base = options.MatrixOptions(stack=["native-torch"]).base_spec(data_dir="/data", threads=2)
    for axis in axes.AXES:
        if axis.default is not axes.HOST and axis.name != "pin_set":
            assert base.identity.setting(axis.name) == axis.default, axis.name
