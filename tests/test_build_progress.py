"""Progress of a local environment build: pip's output lines -> reports, the build's steps and log, and
how the CLI shows them (no real pip: fed lines and a stand-in interpreter)."""

from __future__ import annotations

import io
import stat
import sys
import textwrap

import pytest
from rich.console import Console

from fwbench.cli.build_status import build_status
from fwbench.engines import EngineError
from fwbench.engines import local
from fwbench.engines.local import BuildProgress, PipProgress, StackEnvironment, requirement_count

# What pip 23-25 prints for `pip install -r requirements.txt` into a pipe (no progress bars).
PIP_OUTPUT = """\
Collecting torch==2.14.1 (from -r images/native-torch/requirements.txt (line 3))
  Downloading torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl.metadata (30 kB)
  Downloading torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl (899.7 MB)
Collecting filelock (from torch==2.14.1->-r images/native-torch/requirements.txt (line 3))
  Using cached filelock-3.20.0-py3-none-any.whl.metadata (2.1 kB)
  Using cached filelock-3.20.0-py3-none-any.whl (16 kB)
Requirement already satisfied: pip in ./venv/lib/python3.11/site-packages (24.0)
Processing /opt/wheels/six-1.17.0-py2.py3-none-any.whl (from -r requirements.txt (line 4))
Building wheels for collected packages: promise
  Building wheel for promise (pyproject.toml): started
  Building wheel for promise (pyproject.toml): finished with status 'done'
Installing collected packages: filelock, promise, torch
Successfully installed filelock-3.20.0 promise-2.3 torch-2.14.1
"""


def feed_all(parser: PipProgress, text: str) -> list[BuildProgress]:
    return [event for line in text.splitlines(keepends=True) if (event := parser.feed(line)) is not None]


def test_pip_lines_become_package_details_and_install_steps():
    events = feed_all(PipProgress(requirements=7), PIP_OUTPUT)
    assert [(e.message, e.step) for e in events] == [
        ("collecting torch==2.14.1 (package 1; 7 requested)", False),
        ("downloading torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl (899.7 MB)", False),
        ("collecting filelock (package 2; 7 requested)", False),
        ("using cached filelock-3.20.0-py3-none-any.whl", False),
        ("collecting six-1.17.0-py2.py3-none-any.whl (package 3; 7 requested)", False),
        ("building a wheel for promise", False),
        ("installing 3 packages (filelock, promise, torch)", True),
        ("installed 3 packages", True),
    ]


def test_long_install_lists_are_shortened_and_errors_pass_through():
    parser = PipProgress()
    names = ", ".join(f"pkg{i}" for i in range(40))
    [event] = feed_all(parser, f"Installing collected packages: {names}\n")
    assert event.step and event.message == "installing 40 packages (pkg0, pkg1, pkg2, pkg3, pkg4, ...)"
    assert parser.feed("Collecting x\n").message == "collecting x (package 1)"  # no count requested: none shown
    error = parser.feed("ERROR: No matching distribution found for nosuchpkg==1.0\n")
    assert error == BuildProgress("ERROR: No matching distribution found for nosuchpkg==1.0", step=False)
    assert parser.feed("\n") is None and parser.feed("  Obtaining dependency information\n") is None


def test_requirement_count_skips_comments_blanks_and_options(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text("# header\n\n--extra-index-url https://example.invalid\nnumpy==2.4.6  # pinned\nrich==15.0.0\n")
    assert requirement_count(path) == 2


FAKE_PYTHON = """\
#!/bin/sh
# Stands in for the host interpreter and the venv's: `-m venv DIR` makes DIR/bin/python (this script),
# `-m pip install` prints pip-like lines (or fails when FAKE_PIP_FAIL is set).
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin" "$3/lib/site" && cp "$0" "$3/bin/python"; exit 0; fi
if [ "$1 $2" = "-m pip" ]; then
  if [ -n "$FAKE_PIP_FAIL" ]; then echo "ERROR: No matching distribution found for nosuchpkg"; exit 1; fi
  cat "$FAKE_PIP_OUTPUT"; exit 0
fi
case "$2" in
  *sysconfig*) echo "$(dirname "$(dirname "$0")")/lib/site" ;;
esac
exit 0
"""


@pytest.fixture
def fake_python(tmp_path, monkeypatch):
    script = tmp_path / "fake-python"
    script.write_text(FAKE_PYTHON)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    output = tmp_path / "pip-output.txt"
    output.write_text(PIP_OUTPUT)
    monkeypatch.setattr(sys, "executable", str(script))
    monkeypatch.setenv("FAKE_PIP_OUTPUT", str(output))
    monkeypatch.delenv("FAKE_PIP_FAIL", raising=False)
    return script


def test_build_reports_steps_and_packages_and_keeps_the_whole_log(tmp_path, fake_python):
    environment = StackEnvironment("native-torch", home=tmp_path / "home")
    events: list[BuildProgress] = []
    environment.build(events.append)
    steps = [e.message for e in events if e.step]
    assert steps[0] == (f"building the native-torch (current) environment in {environment.path} "
                        f"(log: {environment.log_path})")
    count = requirement_count(environment.requirements)
    assert environment.locked == local.platform_is_locked()
    install = (f"installing the {count} locked packages of {environment.requirements}" if environment.locked else
               f"installing {count} requirements from {environment.requirements} and their dependencies (this "
               "platform is not the one the lock files are for)")
    assert steps[1:] == [
        "creating the virtual environment",
        install,
        "installing 3 packages (filelock, promise, torch)",
        "installed 3 packages",
        "linking this fwbench checkout and checking that the harness imports",
        "the native-torch (current) environment is ready",
    ]
    assert f"collecting torch==2.14.1 (package 1; {count} requested)" in [e.message for e in events]
    log = environment.log_path.read_text()
    assert PIP_OUTPUT in log  # every line pip printed, not only the ones reported
    assert environment.ready
    assert (environment.path / "lib/site/fwbench-src.pth").read_text().strip() == str(local.REPO_ROOT / "runner")
    events.clear()
    environment.build(events.append)  # ready: nothing to do, nothing to say
    assert events == []


def test_failed_build_names_the_log_and_reports_pips_error(tmp_path, fake_python, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_FAIL", "1")
    environment = StackEnvironment("native-torch", home=tmp_path / "home")
    events: list[BuildProgress] = []
    with pytest.raises(EngineError, match=str(environment.log_path)):
        environment.build(events.append)
    assert events[-1] == BuildProgress("ERROR: No matching distribution found for nosuchpkg", step=False)
    assert "ERROR: No matching distribution found for nosuchpkg" in environment.log_path.read_text()
    assert not environment.ready


def test_plain_output_prints_step_lines_and_only_occasional_details(monkeypatch):
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=40)
    clock = iter([0.0, 1.0, 2.0, 20.0, 21.0])
    monkeypatch.setattr("fwbench.cli.build_status.time.monotonic", lambda: next(clock))
    with build_status(console, "building native-torch") as report:
        report(BuildProgress("creating the virtual environment (log: /a/very/long/path/to/the/build.log)"))
        report(BuildProgress("collecting torch==2.14.1 (package 1)", step=False))  # 1 s after the step: quiet
        report(BuildProgress("collecting numpy (package 2)", step=False))  # 20 s: shown
        report(BuildProgress("collecting rich (package 3)", step=False))
    assert out.getvalue() == textwrap.dedent("""\
        building native-torch: creating the virtual environment (log: /a/very/long/path/to/the/build.log)
          ... collecting numpy (package 2)
        """)


def test_terminal_output_prints_steps_above_the_status_line():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, color_system=None)
    with build_status(console, "building native-torch") as report:
        report(BuildProgress("creating the virtual environment (log: /tmp/x.build.log)"))
        report(BuildProgress("collecting torch==2.14.1 (package 1)", step=False))
    assert "  creating the virtual environment (log: /tmp/x.build.log)" in out.getvalue()
