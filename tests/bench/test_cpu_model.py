"""cpu_model names the CPU with its family and model (a VM's model name is often masked)."""

import os

from bench.support.cpu_model import cpu_model

ZEN4 = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
        "model name\t: AMD EPYC\nstepping\t: 1\n\nprocessor\t: 1\ncpu family\t: 99\n"
        "model\t\t: 1\nmodel name\t: Other\n")


def test_names_the_first_processors_model_family_and_model():
    assert cpu_model(ZEN4) == f"{os.cpu_count()}-core AMD EPYC (family 25, model 17)"


def test_without_a_family_the_model_name_alone():
    assert cpu_model("model name\t: Neoverse\n") == f"{os.cpu_count()}-core Neoverse"


def test_without_a_model_name_an_unknown_cpu():
    assert cpu_model("") == f"{os.cpu_count()}-core unknown CPU"
    assert cpu_model("cpu family\t: 6\nmodel\t\t: 85\n") == \
        f"{os.cpu_count()}-core unknown CPU (family 6, model 85)"


def test_this_machine_is_named():
    assert cpu_model().startswith(f"{os.cpu_count()}-core ")
