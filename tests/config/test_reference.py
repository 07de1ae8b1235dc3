"""Each config key is declared once, and everything that states it (LoopOptions, the task's parser and --help,
configs/config.yaml, docs/reference/configuration.md) comes from that declaration."""
import argparse
import dataclasses

import torch

from basetrainer.config import load_config
from basetrainer.config.flags import flag_help
from basetrainer.engine.lr_scaling import LRScalingRule
from basetrainer.engine.options import LoopOptions
from basetrainer.engine.settings import LOOP_SETTINGS
from basetrainer.fault_tolerance import FaultTolerance
from basetrainer.parallel.communication import Communication
from basetrainer.tasks import reference
from basetrainer.tasks.classification.config import get_parser, parse_config
from basetrainer.tasks.classification.settings import CONFIG_YAML_GROUPS, TASK_SETTINGS
from support import REPO

CPU = torch.device("cpu")


def test_configs_config_yaml_is_what_the_declarations_write():
    written = (REPO / reference.CONFIG_YAML).read_text(encoding="utf-8")
    assert written == reference.config_yaml(), "run: python -m basetrainer.tasks.reference"


def test_docs_configuration_md_is_what_the_declarations_write():
    written = (REPO / reference.CONFIGURATION_MD).read_text(encoding="utf-8")
    assert written == reference.configuration_md(), "run: python -m basetrainer.tasks.reference"


def test_config_yaml_holds_every_task_key_of_its_sections_at_its_default():
    shipped = load_config(REPO / reference.CONFIG_YAML)
    expected = {s.name: s.default for s in TASK_SETTINGS if s.group in CONFIG_YAML_GROUPS}
    assert shipped == expected
    def kind(value):  # a mapping is read as a Config, a dict
        return dict if isinstance(value, dict) else type(value)

    assert {k: kind(v) for k, v in shipped.items()} == {k: kind(v) for k, v in expected.items()}


def test_every_key_line_of_config_yaml_has_a_comment():
    lines = (REPO / reference.CONFIG_YAML).read_text(encoding="utf-8").splitlines()
    keys = [line for line in lines if line[:1].isalpha()]
    assert len(keys) == len(load_config(REPO / reference.CONFIG_YAML))
    assert [line for line in keys if " # " not in line] == []


def test_running_with_config_yaml_gives_the_same_config_as_running_without_it():
    with_file = parse_config(["-c", str(REPO / reference.CONFIG_YAML)])
    without = parse_config([])
    with_file.pop("config_file"), without.pop("config_file")
    assert with_file == without


def test_the_task_parser_defaults_are_the_declared_defaults():
    parsed = vars(get_parser().parse_args([]))
    for key in ("opts", "overrides"):
        parsed.pop(key)
    assert parsed == TASK_SETTINGS.defaults()


def test_each_flag_of_the_task_has_its_declared_default_and_help():
    for action in get_parser()._actions:
        if action.dest in TASK_SETTINGS:
            setting = TASK_SETTINGS[action.dest]
            assert (action.default, action.help) == (setting.default, flag_help(setting)), action.dest


def test_the_task_help_shows_what_each_flag_accepts():
    text = " ".join(get_parser(prog="train").format_help().split())
    assert "images per batch and per process (an integer >= 1; images) (default: 64)" in text


# Keys read into a field of another name: profile into profile_steps, what DDP sends into communication.
READ_INTO = {"profile": "profile_steps", "local_sgd": "communication", "grad_compression": "communication",
             "powersgd": "communication", "parallel": ("mesh", "tensor_parallel_plan", "pipeline")}


def test_loop_options_has_a_field_for_every_loop_key_or_the_one_it_is_read_into():
    fields = {field.name for field in dataclasses.fields(LoopOptions)}
    read_into = [READ_INTO.get(name, name) for name in LOOP_SETTINGS.names()]
    assert fields == {field for into in read_into for field in ((into,) if isinstance(into, str) else into)}


def test_loop_options_of_an_empty_config_are_the_declared_defaults():
    options = LoopOptions.from_config({}, CPU)
    declared = {s.name: s.default for s in LOOP_SETTINGS if s.name not in READ_INTO}
    read = {name: getattr(options, name) for name in declared}
    # Read into their field's form: "auto" is the bar, a list a tuple, no amp no dtype, lr_scaling a rule.
    assert read == {**declared, "amp": None, "fsdp_shard": (), "activation_checkpointing": (),
                    "lr_scaling": LRScalingRule("none", None), "fault_tolerance": FaultTolerance()}
    assert options.communication == Communication()  # plain DDP
    assert options.mesh is None and options.tensor_parallel_plan is None


def test_loop_options_read_a_plain_argparse_namespace_like_a_dict():
    values = {"num_epochs": 3, "accumulate_grad_batches": 2, "gpu_id": [0, 1], "amp": "bf16", "progress": False}
    assert LoopOptions.from_config(argparse.Namespace(**values), CPU) == LoopOptions.from_config(values, CPU)


def test_the_task_declares_every_loop_key():
    assert set(LOOP_SETTINGS.names()) <= set(TASK_SETTINGS.names())
