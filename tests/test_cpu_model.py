"""The CPU a row names (envinfo.cpu_model): a CPU cell's device_model is an identity setting, so two CPU
generations that /proc/cpuinfo gives one model name must not read as one machine."""

from __future__ import annotations

from dataclasses import replace

from fwbench.core.spec import CellSpec
from fwbench.harness import envinfo

# /proc/cpuinfo's first block on two virtual machines seen here, both named "AMD EPYC", 3-4x apart on the same cell.
EPYC_OLDER = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n"
EPYC_NEWER = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n"
ARM = ("processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU architecture: 8\n"
       "CPU variant\t: 0x1\nCPU part\t: 0xd0c\nCPU revision\t: 1\n")


def test_two_generations_under_one_model_name_are_two_cpus():
    assert envinfo.cpu_model(EPYC_NEWER) == "AMD EPYC (family 26, model 2)"
    assert envinfo.cpu_model(EPYC_OLDER) == "AMD EPYC (family 25, model 1)"
    spec = CellSpec(stack="native-torch", task="bert-predict", preset="tiny", compile_mode="eager", data_dir="d",
                    steps=10, device="cpu")
    older = replace(spec, device_model=envinfo.cpu_model(EPYC_OLDER)).identity
    newer = replace(spec, device_model=envinfo.cpu_model(EPYC_NEWER)).identity
    assert older != newer  # compare and verify hold device_model equal only between the same generation


def test_the_first_cpus_block_names_the_machine_and_arm_cpus_their_implementer_and_part():
    second = EPYC_NEWER.replace("26", "23").replace("model\t\t: 2", "model\t\t: 49")
    assert envinfo.cpu_model(EPYC_NEWER + "\n" + second) == "AMD EPYC (family 26, model 2)"
    assert envinfo.cpu_model(ARM).endswith("(implementer 0x41, part 0xd0c)")


def test_a_cpuinfo_without_numbers_gives_the_model_name_alone():
    assert envinfo.cpu_model("processor\t: 0\nmodel name\t: Some CPU\n") == "Some CPU"


def test_only_the_first_cpus_block_is_read(tmp_path):
    """One block per CPU: the reader stops at the first one's end, however many the machine has."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: First\n\nprocessor\t: 1\nmodel name\t: Second\n\n")
    assert "".join(envinfo._first_cpu_block(str(cpuinfo))) == "processor\t: 0\nmodel name\t: First\n"
    assert envinfo._first_cpu_block(str(tmp_path / "absent")) == ()
