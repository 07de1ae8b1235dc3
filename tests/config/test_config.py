"""Specification of the configuration system (basetrainer.config, old path basetrainer.utils.setup_config)."""
import argparse
import os
import pickle
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import yaml

from basetrainer.config import (
    Config,
    add_override_arguments,
    apply_overrides,
    check_config,
    load_config,
    parser_config,
    save_config,
)
from basetrainer.config import legacy as setup_config  # what the old path basetrainer.utils.setup_config is
from basetrainer.errors import ConfigError
from basetrainer.tasks.classification.config import parse_config as task_config
from basetrainer.utils.file_utils import copy_file_to_dir


def make_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("-c", "--config_file", default=None)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("-b", "--batch_size", type=int, default=32)
    parser.add_argument("--num_epochs", type=int, default=10)
    parser.add_argument("--milestones", type=int, nargs="+", default=[3, 6])
    parser.add_argument("--work_dir", default="output")
    parser.add_argument("--distributed", action="store_true")
    return add_override_arguments(parser)


def write_yaml(folder, text, name="config.yaml"):
    path = folder / name
    path.write_text(text)
    return str(path)


def resolve(monkeypatch, argv, parser=None, **kwargs):
    """parser_config as a script run as ``train.py *argv`` would call it."""
    parser = parser or make_parser()
    monkeypatch.setattr(sys, "argv", ["train.py", *argv])
    return parser_config(parser.parse_args(), parser=parser, **kwargs)


# Config


def test_config_keys_read_as_attributes_and_items():
    cfg = Config(lr=0.1)
    assert cfg.lr == cfg["lr"] == cfg.get("lr") == 0.1


def test_config_attribute_assignment_sets_a_key():
    cfg = Config()
    cfg.lr = 0.5
    assert cfg["lr"] == 0.5 and "lr" not in vars(cfg)


def test_config_missing_attribute_raises_attribute_error():
    cfg = Config()
    with pytest.raises(AttributeError):
        cfg.missing
    assert getattr(cfg, "missing", 7) == 7


def test_config_wraps_nested_dicts_also_inside_lists():
    cfg = Config({"optim": {"lr": 0.1}, "stages": [{"epochs": 3}], "pair": ({"a": 1}, 2)})
    assert cfg.optim.lr == 0.1
    assert cfg.stages[0].epochs == 3
    assert isinstance(cfg.pair, tuple) and cfg.pair[0].a == 1


def test_config_wraps_dicts_stored_by_update_setdefault_and_assignment():
    cfg = Config()
    cfg.update(a={"x": 1})
    cfg.setdefault("b", {"y": 2})
    cfg.c = {"z": 3}
    assert (cfg.a.x, cfg.b.y, cfg.c.z) == (1, 2, 3)


def test_config_missing_attribute_deletion_raises_attribute_error():
    with pytest.raises(AttributeError, match="config has no key 'missing'"):
        del Config().missing


def test_config_survives_pickle_round_trip():
    cfg = Config({"lr": 0.1, "optim": {"name": "SGD"}, "stages": [{"epochs": 3}]})
    copy = pickle.loads(pickle.dumps(cfg))
    assert copy == cfg
    assert isinstance(copy, Config) and copy.optim.name == "SGD" and copy.stages[0].epochs == 3


def test_config_to_dict_gives_plain_types():
    cfg = Config({"optim": {"lr": 0.1}, "size": (224, 224), "dir": Path("runs/a"), "flag": True})
    plain = cfg.to_dict()
    assert plain == {"optim": {"lr": 0.1}, "size": [224, 224], "dir": "runs/a", "flag": True}
    assert type(plain["optim"]) is dict


# load_config / save_config


def test_save_then_load_round_trips_a_nested_config(tmp_path):
    cfg = Config({"lr": 1e-4, "optim": {"name": "SGD", "nesterov": True}, "milestones": [3, 6], "resume": None})
    path = save_config(cfg, tmp_path / "config.yaml")
    assert load_config(path) == cfg


def test_save_config_creates_the_folder_and_leaves_no_temporary_file(tmp_path):
    save_config({"lr": 0.1}, tmp_path / "run" / "config.yaml")
    assert os.listdir(tmp_path / "run") == ["config.yaml"]


def test_save_config_writes_plain_yaml_from_a_namespace(tmp_path):
    path = save_config(argparse.Namespace(lr=0.1, device=Path("x")), tmp_path / "args.yaml")
    assert yaml.safe_load(Path(path).read_text()) == {"lr": 0.1, "device": "x"}


def test_load_config_reads_exponents_without_a_dot_as_floats(tmp_path):
    assert load_config(write_yaml(tmp_path, "lr: 1e-3\nwd: 5E-4\n")) == {"lr": 1e-3, "wd": 5e-4}


def test_load_config_of_an_empty_file_is_an_empty_config(tmp_path):
    assert load_config(write_yaml(tmp_path, "")) == {}


def test_yaml_syntax_error_is_a_one_line_config_error_with_file_and_line(tmp_path):
    path = write_yaml(tmp_path, "lr: 0.1\nbatch_size: 32\n  num_epochs: 5\n")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert f"{path} line 3:" in message and "fix the YAML syntax" in message
    assert "\n" not in message


def test_missing_config_file_is_a_config_error_naming_the_path(tmp_path):
    path = str(tmp_path / "nowhere.yaml")
    with pytest.raises(ConfigError, match="nowhere.yaml"):
        load_config(path)


def test_config_file_with_a_list_at_the_top_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="holds a list at the top level"):
        load_config(write_yaml(tmp_path, "- lr\n- 0.1\n"))


def test_config_file_that_is_a_folder_is_a_config_error_naming_it(tmp_path):
    with pytest.raises(ConfigError, match=f"config file {tmp_path} is a directory; give the path of a .yaml file"):
        load_config(tmp_path)


def test_saving_over_a_folder_is_the_same_config_error_as_reading_one(tmp_path):
    with pytest.raises(ConfigError, match=f"config file {tmp_path} is a directory; give the path of a .yaml file"):
        save_config({"lr": 0.1}, tmp_path)


def test_load_config_refuses_python_object_tags(tmp_path):
    with pytest.raises(ConfigError, match="line 1"):
        load_config(write_yaml(tmp_path, "cmd: !!python/object/apply:os.system ['true']\n"))


# parser_config: precedence


def test_parser_defaults_apply_when_nothing_else_sets_a_key(monkeypatch):
    cfg = resolve(monkeypatch, [])
    assert (cfg.lr, cfg.batch_size, cfg.milestones) == (0.1, 32, [3, 6])


def test_yaml_beats_parser_defaults(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "lr: 0.5\nmilestones: [1, 2]\n")
    cfg = resolve(monkeypatch, ["-c", path])
    assert (cfg.lr, cfg.milestones) == (0.5, [1, 2])


def test_typed_flag_beats_yaml(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "lr: 0.5\nbatch_size: 8\n")
    cfg = resolve(monkeypatch, ["-c", path, "--lr", "0.2"])
    assert (cfg.lr, cfg.batch_size) == (0.2, 8)


def test_typed_flag_equal_to_its_default_still_beats_yaml(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "lr: 0.5\n")
    assert resolve(monkeypatch, ["-c", path, "--lr", "0.1"]).lr == 0.1


def test_equals_form_and_abbreviated_flags_count_as_typed(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "lr: 0.5\nnum_epochs: 8\n")
    cfg = resolve(monkeypatch, [f"--config_file={path}", "--lr=0.1", "--num_ep", "10"])
    assert (cfg.lr, cfg.num_epochs) == (0.1, 10)


def test_short_flags_count_as_typed(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "batch_size: 8\n")
    assert resolve(monkeypatch, ["-c", path, "-b", "32"]).batch_size == 32


class LockedInt:
    """A ``type=`` callable holding a lock, as a parser may: such a parser cannot be deep-copied."""

    def __init__(self):
        self.lock = threading.Lock()

    def __call__(self, text):
        with self.lock:
            return int(text)


def test_short_flags_count_as_typed_even_when_the_parser_cannot_be_copied(monkeypatch, tmp_path):
    parser = argparse.ArgumentParser()
    parser.add_argument("-c", "--config_file")
    parser.add_argument("-b", "--batch_size", type=LockedInt(), default=32)
    path = write_yaml(tmp_path, "batch_size: 8\n")
    assert resolve(monkeypatch, ["-c", path, "-b", "32"], parser=parser).batch_size == 32


def test_required_arguments_do_not_hide_which_flags_were_typed(monkeypatch, tmp_path):
    parser = make_parser()
    parser.add_argument("--data", required=True)
    parser.add_argument("run_name")
    path = write_yaml(tmp_path, "lr: 0.5\nbatch_size: 8\n")
    cfg = resolve(monkeypatch, ["-c", path, "--data", "d", "-b", "32", "first"], parser=parser)
    assert (cfg.lr, cfg.batch_size, cfg.data, cfg.run_name) == (0.5, 32, "d", "first")


def test_with_a_subcommand_yaml_still_beats_top_level_defaults_and_typed_flags_beat_yaml(monkeypatch, tmp_path):
    parser = make_parser()
    train = parser.add_subparsers(dest="command").add_parser("train")
    train.add_argument("--epochs", type=int, default=5)
    path = write_yaml(tmp_path, "lr: 0.5\nepochs: 8\n")
    cfg = resolve(monkeypatch, ["-c", path, "train", "--epochs", "3"], parser=parser)
    assert (cfg.lr, cfg.epochs, cfg.command) == (0.5, 3, "train")


def test_when_argv_cannot_be_parsed_again_long_flags_in_it_count_as_typed(monkeypatch, tmp_path):
    parser = make_parser()
    parser.add_argument("--tag", action="append")  # builds on the value it finds, which a second parse cannot give
    path = write_yaml(tmp_path, "lr: 0.5\nbatch_size: 8\n")
    cfg = resolve(monkeypatch, ["-c", path, "--tag", "a", "--lr", "0.1"], parser=parser)
    assert (cfg.lr, cfg.batch_size, cfg.tag) == (0.1, 8, ["a"])


def test_parsing_argv_again_neither_prints_nor_exits_when_argv_is_not_what_args_came_from(monkeypatch, capsys):
    parser = make_parser()
    parser.add_argument("--data", required=True)
    monkeypatch.setattr(sys, "argv", ["pytest", "--help"])
    cfg = parser_config(parser.parse_args(["--data", "d"]), parser=parser, save_args=False)
    assert cfg.data == "d"
    assert capsys.readouterr() == ("", "")


def test_cfg_updata_true_no_longer_lets_yaml_beat_typed_flags(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "lr: 0.5\n")
    assert resolve(monkeypatch, ["-c", path, "--lr", "0.1"], cfg_updata=True).lr == 0.1


def test_without_a_parser_long_flags_in_argv_beat_yaml(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "lr: 0.5\nbatch_size: 8\n")
    monkeypatch.setattr(sys, "argv", ["train.py", "-c", path, "--lr", "0.1"])
    cfg = parser_config(make_parser().parse_args())
    assert (cfg.lr, cfg.batch_size) == (0.1, 8)


def test_flags_parsed_from_another_list_than_sys_argv_beat_yaml(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "lr: 0.5\nbatch_size: 8\n")
    monkeypatch.setattr(sys, "argv", ["pytest", "-q"])
    parser = make_parser()
    cfg = parser_config(parser.parse_args(["-c", path, "--batch_size", "4"]), parser=parser)
    assert (cfg.lr, cfg.batch_size) == (0.5, 4)


def test_argv_argument_names_the_list_the_flags_came_from(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "lr: 0.5\n")
    monkeypatch.setattr(sys, "argv", ["pytest", "-q"])
    argv = ["-c", path, "--lr", "0.1"]
    parser = make_parser()
    assert parser_config(parser.parse_args(argv), parser=parser, argv=argv).lr == 0.1


def test_keys_only_in_the_yaml_are_kept_as_they_are(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "lr: 0.5\nclass_names: [cat, dog]\naugment: {flip: true}\n")
    cfg = resolve(monkeypatch, ["-c", path])
    assert cfg.class_names == ["cat", "dog"] and cfg.augment.flip is True


def test_config_file_is_the_file_read(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "config_file: other.yaml\n")
    assert resolve(monkeypatch, ["-c", path]).config_file == path


def test_without_a_config_file_the_config_is_saved_as_args_config_yaml_in_a_private_temporary_folder(monkeypatch):
    cfg = resolve(monkeypatch, ["--lr", "0.2", "num_epochs=3"])
    folder, name = os.path.split(cfg.config_file)
    assert name == "args_config.yaml"
    assert os.path.dirname(folder) == tempfile.gettempdir() and os.path.basename(folder).startswith("basetrainer-")
    saved = load_config(cfg.config_file)
    assert (saved.lr, saved.num_epochs, saved.config_file) == (0.2, 3, None)


def test_without_a_config_file_nothing_is_written_to_the_current_folder(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    resolve(monkeypatch, [])
    assert os.listdir(tmp_path) == []


def test_old_scripts_copy_of_config_file_into_work_dir_is_args_config_yaml(monkeypatch, tmp_path):
    cfg = resolve(monkeypatch, ["--work_dir", str(tmp_path / "run")])
    copy = copy_file_to_dir(cfg.config_file, cfg.work_dir)
    assert copy == str(tmp_path / "run" / "args_config.yaml")
    assert load_config(copy).work_dir == cfg.work_dir


def test_save_args_false_leaves_config_file_none(monkeypatch):
    assert resolve(monkeypatch, [], save_args=False).config_file is None


def test_each_parse_without_a_config_file_gets_its_own_folder(monkeypatch):
    assert resolve(monkeypatch, []).config_file != resolve(monkeypatch, []).config_file


def test_parser_config_prints_nothing(monkeypatch, tmp_path, capsys):
    resolve(monkeypatch, ["-c", write_yaml(tmp_path, "lr: 0.5\n")])
    assert capsys.readouterr() == ("", "")


def test_old_import_path_is_the_same_code():
    assert setup_config.parser_config is parser_config and setup_config.save_config is save_config
    assert setup_config.Config is Config and setup_config.apply_overrides is apply_overrides


# parser_config: key=value overrides


def test_override_beats_typed_flag_and_yaml(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "lr: 0.5\n")
    assert resolve(monkeypatch, ["-c", path, "--lr", "0.2", "lr=0.3"]).lr == 0.3


def test_override_sets_a_nested_key_and_keeps_its_siblings(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "optim: {name: SGD, momentum: 0.9}\n")
    cfg = resolve(monkeypatch, ["-c", path, "optim.momentum=0.5"])
    assert cfg.optim == {"name": "SGD", "momentum": 0.5}


def test_override_values_are_read_as_yaml():
    cfg = apply_overrides(Config(), ["lr=0.1", "wd=5e-4", "milestones=[3,6]", "amp=bf16", "resume=", "on=true"])
    assert cfg == {"lr": 0.1, "wd": 5e-4, "milestones": [3, 6], "amp": "bf16", "resume": None, "on": True}


def test_override_creates_missing_nested_keys():
    assert apply_overrides(Config(), ["model.head.dropout=0.2"]).model.head.dropout == 0.2


def test_opts_flag_and_bare_overrides_both_apply(monkeypatch):
    cfg = resolve(monkeypatch, ["--opts", "num_epochs=2", "--lr", "0.2", "batch_size=4"])
    assert (cfg.num_epochs, cfg.batch_size, cfg.lr) == (2, 4, 0.2)


def test_opts_is_not_left_in_the_config(monkeypatch):
    cfg = resolve(monkeypatch, ["lr=0.3", "--opts", "seed=1"])
    assert "opts" not in cfg and "overrides" not in cfg


def test_override_without_an_equals_sign_is_a_config_error():
    with pytest.raises(ConfigError, match="write it as key=value"):
        apply_overrides(Config(), ["lr"])


def test_override_below_a_value_that_is_not_a_mapping_is_a_config_error():
    with pytest.raises(ConfigError, match="'lr' is a float, not a mapping"):
        apply_overrides(Config(lr=0.1), ["lr.x=1"])


def test_override_arguments_start_empty_on_every_parse():
    parser = make_parser()
    parser.parse_args(["a=1", "--opts", "b=2"])
    assert parser.parse_args([]).opts == []


# strict checking


def strict_error(monkeypatch, argv, **kwargs):
    """The message of the ConfigError that resolving ``argv`` with strict=True raises."""
    with pytest.raises(ConfigError) as error:
        resolve(monkeypatch, argv, strict=True, **kwargs)
    return str(error.value)


def test_strict_unknown_yaml_key_suggests_the_closest_known_key(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "lrr: 0.5\n")
    assert strict_error(monkeypatch, ["-c", path]) == f"unknown config key 'lrr' (in {path} line 1): did you mean 'lr'?"


def test_strict_unknown_override_key_suggests_the_closest_known_key(monkeypatch):
    message = strict_error(monkeypatch, ["--opts", "batchsize=4"])
    assert message == "unknown config key 'batchsize' (from --opts): did you mean 'batch_size'?"


def test_strict_error_for_a_bare_override_says_it_came_from_the_command_line(monkeypatch):
    message = strict_error(monkeypatch, ["optim.momentum=0.9"])
    assert message == "unknown config key 'optim' (from the command line); check its spelling or remove it"


def test_strict_unknown_key_with_no_close_match_says_to_check_it(monkeypatch):
    assert strict_error(monkeypatch, ["zzz=1"]).endswith("; check its spelling or remove it")


def test_strict_wrong_type_in_yaml_names_the_key_and_the_type_expected(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "batch_size: abc\n")
    message = strict_error(monkeypatch, ["-c", path])
    assert message == f"config key 'batch_size' expects int, got str 'abc' (in {path} line 1)"


def test_strict_wrong_type_in_override_names_the_key_and_the_type_expected(monkeypatch):
    message = strict_error(monkeypatch, ["lr=fast"])
    assert message == "config key 'lr' expects float, got str 'fast' (from the command line)"


def test_strict_checks_nested_keys_given_as_known(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "optim: {momentun: 0.9}\n")
    message = strict_error(monkeypatch, ["-c", path], known={"optim": {"momentum": 0.9}})
    assert message == f"unknown config key 'optim.momentun' (in {path} line 1): did you mean 'optim.momentum'?"


def test_strict_passes_a_config_that_matches(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "lr: 1\noptim: {momentum: 0.8}\nnotes: anything\n")
    cfg = resolve(monkeypatch, ["-c", path, "optim.momentum=0.7"], strict=True,
                  known={"optim": {"momentum": 0.9}, "notes": None})
    assert (cfg.lr, cfg.optim.momentum, cfg.notes) == (1, 0.7, "anything")


def test_non_strict_accepts_unknown_keys_and_any_types(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "lrr: 0.5\nbatch_size: abc\n")
    cfg = resolve(monkeypatch, ["-c", path, "zzz=1"])
    assert (cfg.lrr, cfg.batch_size, cfg.zzz) == (0.5, "abc", 1)


# check_config: the type rules


@pytest.mark.parametrize("default, value", [(0.1, 1), (0.1, 0.5), (1, 2), (True, False), ("a", "b"),
                                            ([1], (2, 3)), (None, "x"), ({}, {"any": 1})])
def test_check_config_accepts_values_of_the_default_type(default, value):
    check_config({"key": value}, {"key": default})


@pytest.mark.parametrize("default, value, expected", [
    (1, True, "expects int, got bool True"),
    (1, 1.5, "expects int, got float 1.5"),
    (0.1, "0.1", "expects float, got str '0.1'"),
    (True, 1, "expects bool, got int 1"),
    ("a", 1, "expects str, got int 1"),
    (1, None, "expects int, got None"),
    ([1, 2], 3, "expects a list, got int 3"),
    ({"a": 1}, 3, "expects a mapping, got int 3"),
])
def test_check_config_rejects_values_of_another_type(default, value, expected):
    with pytest.raises(ConfigError, match=f"config key 'key' {expected}"):
        check_config({"key": value}, {"key": default})


def test_check_config_checks_list_items_against_the_defaults_items():
    with pytest.raises(ConfigError, match=r"config key 'milestones\[1\]' expects int, got str 'x'"):
        check_config({"milestones": [3, "x"]}, {"milestones": [3, 6]})


def test_check_config_lets_allow_extra_keys_through():
    check_config({"lr": 0.1, "classes": ["a"], "optim": {"beta": 1}}, {"lr": 0.1, "optim": {"momentum": 0.9}},
                 allow_extra=("classes", "optim.beta"))


def test_strict_checks_yaml_values_even_where_a_typed_flag_wins(monkeypatch, tmp_path):
    path = write_yaml(tmp_path, "batch_size: abc\n")
    with pytest.raises(ConfigError):
        resolve(monkeypatch, ["-c", path, "--batch_size", "4"], strict=True)



# the old library's other names (basetrainer.utils.setup_config)


def test_old_load_config_takes_easy_and_returns_a_config_with_attribute_access(tmp_path):
    cfg = setup_config.load_config(write_yaml(tmp_path, "optim: {lr: 0.1}\n"), easy=True)
    assert isinstance(cfg, Config) and cfg.optim.lr == 0.1


def test_old_update_dict_lets_the_second_win_and_merges_nested_dicts():
    merged = setup_config.update_dict({"a": 0, "b": {"x": 0, "y": 0}}, {"a": 1, "b": {"x": 1}, "d": 1})
    assert merged == {"a": 1, "b": {"x": 1, "y": 0}, "d": 1}


def test_old_update_dict_leaves_its_arguments_as_they_were():
    first = {"b": {"x": 0}}
    setup_config.update_dict(first, {"b": {"x": 1}})
    assert first == {"b": {"x": 0}}


def test_old_easy2dict_and_dict2easy_convert_between_plain_dicts_and_configs():
    cfg = setup_config.dict2easy({"optim": {"lr": 0.1}})
    assert cfg.optim.lr == 0.1
    assert type(setup_config.easy2dict(cfg)["optim"]) is dict
    assert setup_config.Dict2Obj({"lr": 0.1}).lr == 0.1


def test_old_parser_config_file_lets_the_config_win_unless_cfg_updata_is_false(tmp_path):
    path = write_yaml(tmp_path, "lr: 0.5\nbatch_size: 8\n")
    assert setup_config.parser_config_file({"lr": 0.1}, path) == {"lr": 0.1, "batch_size": 8}
    assert setup_config.parser_config_file({"lr": 0.1}, path, cfg_updata=False) == {"lr": 0.5, "batch_size": 8}


def test_old_parser_work_space_joins_the_flags_and_the_time(monkeypatch):
    monkeypatch.setattr("basetrainer.config.legacy.get_time", lambda: "20240131_154502")
    flags = ["resnet18", None, 224]
    assert setup_config.parser_work_space("output", flags) == os.path.join("output", "resnet18_224_20240131_154502")
    assert setup_config.parser_work_space("output", "resnet18", time=False) == os.path.join("output", "resnet18")
    assert flags == ["resnet18", None, 224]


def test_old_create_workspace_makes_the_folders_and_copies_the_config_file_in(tmp_path):
    cfg = Config(work_dir=str(tmp_path), config_file=write_yaml(tmp_path, "lr: 0.1\n", name="train.yaml"))
    setup_config.create_workspace(cfg, flags=["resnet18"])
    assert os.path.basename(cfg.work_dir).startswith("resnet18_")
    assert os.path.isdir(cfg.model_dir) and os.path.isdir(cfg.log_dir)
    assert load_config(os.path.join(cfg.work_dir, "train.yaml")) == {"lr": 0.1}


def test_old_print_dict_prints_key_value_lines_and_can_save_them(tmp_path, capsys):
    setup_config.print_dict({"lr": 0.1, "net": "resnet18"}, save_path=tmp_path / "cfg.txt")
    assert "lr: 0.1\nnet: resnet18\n" in capsys.readouterr().out
    assert (tmp_path / "cfg.txt").read_text() == "lr: 0.1\nnet: resnet18\n"


def test_old_parser_config_name_is_a_one_line_error_naming_the_replacement():
    with pytest.raises(NotImplementedError, match=r"parser_config_name was removed; build the name with '_'\.join"):
        setup_config.parser_config_name({"a": 1}, key="a")


# layout


def test_no_configuration_module_is_over_350_lines():
    root = Path(__file__).resolve().parents[2] / "basetrainer"
    modules = [path for path in root.rglob("*.py") if "config" in path.relative_to(root).as_posix()]
    lengths = {path.name: len(path.read_text().splitlines()) for path in modules}
    assert lengths and {name: length for name, length in lengths.items() if length > 350} == {}


def test_a_crop_ratio_so_small_that_the_resize_overflows_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"images would be resized to inf pixels .* raise crop_ratio"):
        task_config(["crop_ratio=2.2e-309"])


def test_num_workers_is_auto_by_default_and_takes_auto_or_a_number_from_flags_overrides_and_yaml(tmp_path):
    path = write_yaml(tmp_path, "num_workers: auto\n")
    assert task_config([]).num_workers == "auto"
    assert [task_config(argv).num_workers for argv in (["--num_workers", "2"], ["--num_workers", "auto"],
                                                       ["num_workers=3"], ["num_workers=auto"], ["-c", path])] \
        == [2, "auto", 3, "auto", "auto"]


def test_a_num_workers_that_is_neither_auto_nor_a_number_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"config key 'num_workers' expects auto or an integer in \[0, 256\], "
                                          r"got str 'many'"):
        task_config(["--num_workers", "many"])


def test_train_data_takes_a_list_of_sources_with_weights_to_mix():
    cfg = task_config(["train_data=[{path: s3://bucket/web, weight: 3}, {path: shards/curated}]"])
    assert cfg.train_data == [{"path": "s3://bucket/web", "weight": 3}, {"path": "shards/curated"}]


@pytest.mark.parametrize("sources, said", [("[{path: a, weight: 0}]", "weight is int 0"),
                                           ("[{weight: 2}]", "its path is missing"),
                                           ("[{path: a, wieght: 2}]", "wieght is no field of it"),
                                           ("[]", "it has 0 items")])
def test_a_bad_list_of_sources_is_refused_in_one_line(sources, said):
    with pytest.raises(ConfigError, match=r"config key 'train_data' expects a path or a list of 1 or more "
                                          r"mappings of path") as refused:
        task_config([f"train_data={sources}"])
    assert said in str(refused.value) and "\n" not in str(refused.value)
