"""Progress of a local environment build: uv's output lines -> reports, the build's steps and log, and
how the CLI shows them (no real uv: fed lines and a stand-in uv and interpreter; the real build is
covered by the integration tests that use the stack environments)."""

from __future__ import annotations

import io
import stat
import subprocess
import sys
import textwrap
import time

import pytest
from rich.console import Console

from fwbench.cli.build_status import build_status
from fwbench.engines import EngineError
from fwbench.engines import local
from fwbench.engines.local import BuildProgress, StackEnvironment, UvProgress, requirement_count

# What uv 0.13 prints for `uv pip install --require-hashes --no-deps -r <lock>` into a pipe (no bars):
# a line per large download and per wheel build, nothing for a package it takes from its cache.
UV_OUTPUT = """\
Using Python 3.11.7 environment at: /home/u/.cache/fwbench/venvs/native-torch-current-0123/
Resolved 3 packages in 101ms
Downloading torch (899.7MiB)
Building promise==2.3
 Downloaded torch
      Built promise==2.3
Prepared 3 packages in 41.20s
Installed 3 packages in 230ms
 + filelock==3.20.0
 + promise==2.3
 + torch==2.14.1
"""


def feed_all(parser: UvProgress, text: str) -> list[BuildProgress]:
    return [event for line in text.splitlines(keepends=True) if (event := parser.feed(line)) is not None]


def test_uv_lines_become_package_details_and_install_steps():
    events = feed_all(UvProgress(requirements=7), UV_OUTPUT)
    assert [(e.message, e.step) for e in events] == [
        ("resolved 3 packages of 7 requested", False),
        ("downloading torch (899.7MiB)", False),
        ("building a wheel for promise", False),
        ("installing 3 packages (prepared in 41.20s; linked from the shared cache)", True),
        ("installed 3 packages", True),
    ]


def test_errors_pass_through_and_other_lines_are_quiet():
    parser = UvProgress()
    assert parser.feed("Resolved 1 package in 3ms\n").message == "resolved 1 packages"  # no count requested
    error = parser.feed("error: Failed to download `nosuchpkg==1.0`\n")
    assert error == BuildProgress("error: Failed to download `nosuchpkg==1.0`", step=False)
    hashes = parser.feed("  × Hash mismatch for `numpy==2.4.6`\n")
    assert hashes == BuildProgress("× Hash mismatch for `numpy==2.4.6`", step=False)
    assert parser.feed("\n") is None and parser.feed(" + torch==2.14.1\n") is None
    assert parser.feed(" Downloaded torch\n") is None and parser.feed("      Built promise==2.3\n") is None


def test_requirement_count_skips_comments_blanks_and_options(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text("# header\n\n--extra-index-url https://example.invalid\nnumpy==2.4.6  # pinned\nrich==15.0.0\n")
    assert requirement_count(path) == 2


# Stands in for uv (`venv DIR` makes DIR/bin/python, a copy of FAKE_PYTHON; `pip install` prints uv-like
# lines and records its arguments and uv settings, or fails when FAKE_UV_FAIL is set) ...
FAKE_UV = """\
#!/bin/sh
if [ "$1" = "venv" ]; then mkdir -p "$4/bin" "$4/lib/site" && cp "$FAKE_PYTHON" "$4/bin/python"; exit 0; fi
if [ "$1 $2" = "pip install" ]; then
  echo "$* cache=$UV_CACHE_DIR link=$UV_LINK_MODE" >> "$FAKE_UV_CALLS"
  if [ -n "$FAKE_UV_FAIL" ]; then echo "error: Failed to download nosuchpkg"; exit 1; fi
  cat "$FAKE_UV_OUTPUT"; exit 0
fi
exit 2
"""
# ... and for the environment's interpreter.
FAKE_PYTHON = """\
#!/bin/sh
case "$2" in
  *sysconfig*) echo "$(dirname "$(dirname "$0")")/lib/site" ;;
esac
exit 0
"""


@pytest.fixture
def fake_uv(tmp_path, monkeypatch):
    scripts = {}
    for name, text in (("fake-uv", FAKE_UV), ("fake-python", FAKE_PYTHON)):
        scripts[name] = tmp_path / name
        scripts[name].write_text(text)
        scripts[name].chmod(scripts[name].stat().st_mode | stat.S_IEXEC)
    output = tmp_path / "uv-output.txt"
    output.write_text(UV_OUTPUT)
    monkeypatch.setattr(local, "uv_binary", lambda: scripts["fake-uv"])
    monkeypatch.setenv("FAKE_PYTHON", str(scripts["fake-python"]))
    monkeypatch.setenv("FAKE_UV_OUTPUT", str(output))
    monkeypatch.setenv("FAKE_UV_CALLS", str(tmp_path / "uv-calls.txt"))
    monkeypatch.delenv("FAKE_UV_FAIL", raising=False)
    return tmp_path / "uv-calls.txt"


def test_build_reports_steps_and_packages_and_keeps_the_whole_log(tmp_path, fake_uv):
    home = tmp_path / "home"
    environment = StackEnvironment("native-torch", home=home)
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
        "installing 3 packages (prepared in 41.20s; linked from the shared cache)",
        "installed 3 packages",
        "linking this fwbench checkout and checking that the harness imports",
        "the native-torch (current) environment is ready",
    ]
    assert "downloading torch (899.7MiB)" in [e.message for e in events]
    log = environment.log_path.read_text()
    assert UV_OUTPUT in log  # every line uv printed, not only the ones reported
    assert environment.ready
    assert (environment.path / "lib/site/fwbench-src.pth").read_text().strip() == str(local.REPO_ROOT / "runner")
    # The lock's strictness, into this environment, through the machine's one cache, hard-linked.
    first_call = fake_uv.read_text().splitlines()[0]
    assert f"--python {environment.python}" in first_call
    assert f"cache={home / 'uv-cache'} link=hardlink" in first_call
    if environment.locked:
        assert f"--no-deps --require-hashes -r {environment.requirements}" in first_call
    events.clear()
    environment.build(events.append)  # ready: nothing to do, nothing to say
    assert events == []


def test_failed_build_names_the_log_and_reports_uvs_error(tmp_path, fake_uv, monkeypatch):
    monkeypatch.setenv("FAKE_UV_FAIL", "1")
    environment = StackEnvironment("native-torch", home=tmp_path / "home")
    events: list[BuildProgress] = []
    with pytest.raises(EngineError, match=str(environment.log_path)):
        environment.build(events.append)
    assert events[-1] == BuildProgress("error: Failed to download nosuchpkg", step=False)
    assert "error: Failed to download nosuchpkg" in environment.log_path.read_text()
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


def test_a_second_build_waits_for_the_first_and_then_builds_nothing(tmp_path, fake_uv):
    """Two processes wanting the same environment (a demo beside a test run, pytest workers): the one that finds
    it being built says so, waits, and installs nothing itself. Here the first build is another process holding
    the lock, which finishes the environment before letting go."""
    import threading

    environment = StackEnvironment("native-torch", home=tmp_path / "home")
    environment.path.parent.mkdir(parents=True)
    lock_path = environment.path.with_name(environment.path.name + ".lock")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time; from pathlib import Path\n"
        "lock = open(sys.argv[1], 'a+'); fcntl.flock(lock, fcntl.LOCK_EX); lock.write('process 4242'); lock.flush()\n"
        "print('locked', flush=True); sys.stdin.readline()\n"
        "Path(sys.argv[2]).mkdir(); Path(sys.argv[2], '.fwbench-ready').write_text('built elsewhere')\n"),
        str(lock_path), str(environment.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    events: list[BuildProgress] = []
    waiter = threading.Thread(target=environment.build, args=(events.append,))
    waiter.start()
    for _ in range(200):
        if events:
            break
        time.sleep(0.05)
    assert events == [BuildProgress("waiting for process 4242, which is building the native-torch (current) "
                                    "environment")]
    assert waiter.is_alive()  # still waiting while the other holds the lock
    holder.communicate("go\n", timeout=30)
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    assert events[1:] == []  # nothing rebuilt
    assert not fake_uv.exists()  # uv never called
    assert (environment.path / ".fwbench-ready").read_text() == "built elsewhere"
