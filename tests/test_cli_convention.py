"""One CLI convention (issue 37): an option means the same thing by the same name, short form and default in every
command; -h, --help and --version everywhere; a required option names no default."""

from __future__ import annotations

import collections

import pytest
import typer
from typer.testing import CliRunner

from fwbench import __version__
from fwbench.cli.commands import app
from tests.test_options import commands

# Options whose default differs between commands on purpose, with why (anything else must agree everywhere).
DEFAULTS_DIFFER = {
    "out": "where each command writes (a results, data, release or report folder) has its own sensible name",
    "repeats": "verify and bisect judge, and a verdict needs at least 3 (verify re-runs 5)",
    "steps": "demo times 5 steps; stability's fits are untimed optimisation runs (300)",
    "threads": "a Kubernetes pod cannot see its node's cores ahead (8)",
    "parallel": "demo runs one cell per core by default (auto)",
    "resume": "demo keeps earlier ok rows by default",
    "max_repeats": "verify's cap follows --repeats; bisect's is its own",
    "tolerance": "verify's band is the publisher's 10%; sweep and bisect call 5% no change",
    "image": "publish names its own images; run and slurm take a template only to override theirs",
    "precision": "stability needs one named precision to check against fp32",
}


def options_by_name():
    found = collections.defaultdict(list)
    for path, command in commands():
        for param in command.params:
            if param.param_type_name == "option" and param.name not in ("help",):
                found[param.name].append((" ".join(path), param))
    return found


def test_an_option_has_one_spelling_and_one_default_everywhere():
    for name, uses in options_by_name().items():
        spellings = {tuple(sorted(p.opts + p.secondary_opts)) for _, p in uses}
        assert len(spellings) == 1, (name, [(where, p.opts) for where, p in uses])
        if name not in DEFAULTS_DIFFER:
            defaults = {repr(p.default) for where, p in uses if not p.required}
            assert len(defaults) <= 1, (name, [(where, p.default) for where, p in uses])


def test_out_is_o_everywhere_and_o_means_only_out():
    for name, uses in options_by_name().items():
        for where, param in uses:
            opts = set(param.opts)
            assert ("-o" in opts) == ("--out" in opts), (where, param.opts)


def test_preset_has_one_default():
    defaults = {param.default for _, param in options_by_name()["preset"]}
    assert defaults == {"tiny"}


def test_a_required_option_names_no_default_in_its_help():
    for name, uses in options_by_name().items():
        for where, param in uses:
            if param.required:
                assert "(default:" not in (param.help or ""), (where, name, param.help)


@pytest.mark.parametrize("path", [path for path, _ in commands()][:60])
def test_h_is_help_in_every_command(path):
    result = CliRunner().invoke(app, [*path, "-h"])
    assert result.exit_code == 0 and "Usage:" in result.output, (path, result.output[-500:])


def test_version():
    for flag in ("--version", "-V"):
        result = CliRunner().invoke(app, [flag])
        assert result.exit_code == 0 and result.output.strip() == f"fwbench {__version__}"
