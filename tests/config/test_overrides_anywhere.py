"""A ``KEY=VALUE`` token whose key is a config key is an override wherever it stands on the classification task's
command line, also right after a flag that takes several values."""
import pytest

from basetrainer.config.overrides import overrides_first
from basetrainer.errors import ConfigError
from basetrainer.tasks.classification.config import parse_config


def test_an_override_after_a_list_flag_is_an_override():
    cfg = parse_config(["--distributed", "--gpu_id", "0", "1", "strategy=fsdp"])
    assert (cfg.gpu_id, cfg.strategy, cfg.distributed) == ([0, 1], "fsdp", True)


def test_overrides_between_the_values_of_list_flags_keep_their_order():
    cfg = parse_config(["--milestones", "3", "6", "lr=0.1", "--gpu_id", "0", "lr=0.2", "momentum=0.5"])
    assert (cfg.milestones, cfg.gpu_id, cfg.lr, cfg.momentum) == ([3, 6], [0], 0.2, 0.5)


def test_a_value_that_only_looks_like_an_override_stays_the_flags_value():
    cfg = parse_config(["--work_dir", "runs/lr=0.1", "--test_data", "a=b"])
    assert (cfg.work_dir, cfg.test_data) == ("runs/lr=0.1", "a=b")


def test_the_values_of_opts_stay_where_they_are_and_say_so_in_errors():
    with pytest.raises(ConfigError, match=r"^config key 'batch_size' expects an integer >= 1, got str 'big' \(from --opts\)$"):
        parse_config(["--gpu_id", "0", "1", "--opts", "lr=0.1", "batch_size=big"])


def test_the_overrides_move_to_the_front_and_everything_after_a_double_dash_stays():
    argv = ["--gpu_id", "0", "lr=0.1", "--opts", "seed=1", "--", "seed=2"]
    assert overrides_first(argv, {"lr", "seed"}) == ["lr=0.1", "--gpu_id", "0", "--opts", "seed=1", "--", "seed=2"]
