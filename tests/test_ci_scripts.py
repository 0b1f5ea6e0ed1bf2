"""CI's choice of the CPU images it builds and runs (.ci/docker-stacks.sh) and of the GPU image it checks
(.ci/gpu-image.sh), in a throwaway git repository."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OTHERS = ["keras3-tensorflow", "keras3-torch", "keras2-tensorflow", "native-torch"]
ALL = ["keras3-jax", *OTHERS]
EDITS = itertools.count()


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def commit(repo: Path, *paths: str) -> str:
    for path in paths:
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(f"edit {next(EDITS)}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "change")
    return git(repo, "rev-parse", "HEAD")


def picked(repo: Path, rev: str = "HEAD") -> list[str]:
    done = subprocess.run(["bash", str(ROOT / ".ci" / "docker-stacks.sh"), rev], cwd=repo, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.fixture
def repo(tmp_path):
    git(tmp_path, "init", "-q")
    commit(tmp_path, "README.md", "images/Dockerfile", "images/keras3-jax/apt-packages.txt")
    return tmp_path


def test_a_root_commit_builds_every_image(repo):
    assert picked(repo) == ALL


def test_a_commit_that_touches_no_image_builds_keras3_jax_and_one_more_by_rotation(repo):
    head = commit(repo, "runner/fwbench/cli.py")
    assert picked(repo) == ["keras3-jax", OTHERS[int(head[:7], 16) % len(OTHERS)]]


def test_successive_commits_cover_every_image(repo):
    seen = set()
    for n in range(40):
        commit(repo, f"docs/page{n}.md")
        seen.update(picked(repo))
    assert seen == set(ALL)


def test_a_stacks_own_files_put_that_stack_in(repo):
    commit(repo, "images/keras2-tensorflow/paper-2024/requirements-cpu.lock", "images/native-torch/apt-packages.txt")
    assert picked(repo) == ["keras3-jax", "keras2-tensorflow", "native-torch"]


@pytest.mark.parametrize("path", ["images/Dockerfile", "images/Dockerfile.classic", "images/install.sh",
                                  "images/entrypoint.sh", "images/compose.services.yaml", "images/tools/sbom.lock",
                                  "compose.cpu.yaml", "compose.yaml", "pyproject.toml"])
def test_what_every_image_is_built_from_puts_all_five_in(repo, path):
    commit(repo, path)
    assert picked(repo) == ALL


LOCKS = sorted(f"images/{stack}/{pin_set}/requirements-gpu.lock" for stack in ALL for pin_set in ("current", "paper-2024"))


def gpu_image(repo: Path, **env: str) -> str:
    import os

    done = subprocess.run(["bash", str(ROOT / ".ci" / "gpu-image.sh")], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "FWBENCH_CI_GPU_CHECK": "0", **env})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def repo_with_locks(repo):
    commit(repo, *LOCKS)
    return repo


def test_a_commit_that_changes_no_gpu_image_input_checks_no_gpu_image(repo_with_locks):
    commit(repo_with_locks, "runner/fwbench/cli.py", "images/keras3-jax/current/requirements-cpu.lock")
    assert gpu_image(repo_with_locks) == ""


def test_a_changed_gpu_lock_is_the_one_checked(repo_with_locks):
    commit(repo_with_locks, "images/native-torch/current/requirements-gpu.lock", "docs/x.md")
    assert gpu_image(repo_with_locks) == "images/native-torch/current/requirements-gpu.lock its lock changed in this commit"


def test_a_deleted_gpu_lock_gives_way_to_the_next_changed_one(repo_with_locks):
    """The first changed lock in path order was taken even where the commit deleted it: then no GPU image at all."""
    (repo_with_locks / LOCKS[0]).unlink()
    commit(repo_with_locks, LOCKS[1])
    assert gpu_image(repo_with_locks) == f"{LOCKS[1]} its lock changed in this commit"


@pytest.mark.parametrize("path", ["images/Dockerfile", "images/install.sh", "compose.yaml", "pyproject.toml"])
def test_what_every_image_is_built_from_checks_one_gpu_image_by_rotation(repo_with_locks, path):
    head = commit(repo_with_locks, path)
    lock, why = gpu_image(repo_with_locks).split(" ", 1)
    assert lock == LOCKS[int(head[:7], 16) % len(LOCKS)] and why.startswith("what every image is built from changed")


def test_successive_shared_changes_cover_every_gpu_image_and_the_variable_forces_one(repo_with_locks):
    # Until every lock is seen: about 30 commits on average for 10 locks. A fixed 60 missed one about 2% of the time
    # (10 x 0.9^60); 300 at most misses one with odds of about 1e-13 when the rotation covers all.
    seen = set()
    for _ in range(300):
        commit(repo_with_locks, "images/entrypoint.sh")
        seen.add(gpu_image(repo_with_locks).split()[0])
        if seen >= set(LOCKS):
            break
    assert seen == set(LOCKS)
    commit(repo_with_locks, "docs/y.md")
    assert gpu_image(repo_with_locks, FWBENCH_CI_GPU_CHECK="1").split()[0] in LOCKS


def test_the_script_names_only_stacks_the_e2e_tests_know():
    from tests.test_docker_e2e import SERVICES

    assert set(ALL) == set(SERVICES)


@pytest.mark.parametrize("other", OTHERS)
def test_the_model_file_test_pairs_keras3_jax_with_an_image_that_runs_a_model_file(other):
    """CI's rotation built keras3-jax and keras2-tensorflow once, and the Docker model-file test asked
    keras2-tensorflow (Keras 2: no model files) to run one, failing with a usage error. Whatever pair the script
    prints, the test's partner can run a model file, or the test has none and skips."""
    from fwbench.core import registry
    from fwbench.engines.model_files import runs_model_files
    from tests.test_docker_e2e import model_file_partner

    partner = model_file_partner(["keras3-jax", other])
    assert partner is None or runs_model_files(registry.STACKS[partner])
    assert (partner is None) == (other == "keras2-tensorflow")
    assert model_file_partner(ALL) == "native-torch"  # the twin, where its image is built


def test_ci_prunes_dangling_images_only_before_its_builds_start():
    """A classic build (CI's GPU image check) keeps its intermediate layers as dangling images until it tags the
    result: CI pruned dangling images once the CPU images were built, while the GPU check was still building, and it
    failed with "No such image" on its next step. A prune is safe only before any build starts, and nothing that
    runs beside the builds (the image scripts, the Docker tests) prunes images."""
    code = [line.split("#", 1)[0] for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    prunes = [n for n, line in enumerate(code) if "image prune" in line or "system prune" in line]
    builds = [n for n, line in enumerate(code) if "bash images/check-gpu-image.sh" in line
              or "docker-compose -f" in line or "bash .ci/make-base-image.sh" in line]
    assert prunes and builds and max(prunes) < min(builds)
    beside = [*(ROOT / "images").glob("*.sh"), *(ROOT / ".ci").glob("*.sh"),
              *(path for path in (ROOT / "tests").glob("*.py") if path.name != Path(__file__).name)]
    assert not [path.name for path in beside
                if "image prune" in path.read_text() or "system prune" in path.read_text()]


def test_the_docker_tests_give_compose_as_long_as_the_engine_to_answer(monkeypatch):
    """docker-compose 1.29's default 60 s failed CI's `compose run aggregate` while the daemon was busy."""
    import tests.test_docker_e2e as e2e

    seen = {}
    monkeypatch.setattr(e2e, "compose_command", lambda: ["docker-compose"])
    monkeypatch.setattr(e2e.subprocess, "run", lambda command, **kw: seen.update(kw["env"]))
    e2e.compose({"PATH": "/usr/bin"}, "run", "--rm", "aggregate")
    assert int(seen["COMPOSE_HTTP_TIMEOUT"]) >= e2e.API_TIMEOUT_S
