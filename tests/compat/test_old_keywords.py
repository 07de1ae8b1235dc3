"""The earlier library's keywords and positional orders of set_logger, create_dir, get_scheduler and
get_optimizer keep their meaning; where one cannot have any, a warning says what is ignored."""
import datetime
import logging
import math
import os
import time

import pytest
import torch
from torch import nn

from basetrainer.errors import ConfigError
from basetrainer.optimizer.build_optimizer import get_optimizer
from basetrainer.scheduler.build_scheduler import get_scheduler
from basetrainer.utils import file_utils, log

LR, EPOCHS, STEPS = 0.1, 6, 10


@pytest.fixture(autouse=True)
def quiet_logger_afterwards():
    yield
    log.set_logger(level="info")  # closes the files a test's handlers hold


# ---------------------------------------------------------------------- set_logger
def test_set_logger_reads_positional_arguments_in_the_earlier_order_name_first(tmp_path):
    with pytest.warns(DeprecationWarning, match=r"set_logger\(name='LOG'\) has no effect"):
        logger = log.set_logger("LOG", "warning", str(tmp_path / "train.log"))
    logger.info("not at warning")
    logger.warning("shown")
    assert logger.level == logging.WARNING and (tmp_path / "train.log").read_text().count("shown") == 1
    assert "not at warning" not in (tmp_path / "train.log").read_text()


def test_set_logger_still_reads_a_level_given_first(tmp_path):
    logger = log.set_logger("info", str(tmp_path / "train.log"))
    logger.info("line")
    assert logger.level == logging.INFO and "line" in (tmp_path / "train.log").read_text()


@pytest.mark.parametrize("format, line", [
    ("simple", "|INFO   | hello"),
    ("function", "|INFO   |test_old_keywords.test_set_logger_format_names_the_earlier_line_layouts "),
    (True, " test_old_keywords.py test_set_logger_format_names_the_earlier_line_layouts INFO: hello"),
    (False, "INFO: hello"),
    ("%(levelname)s - %(message)s", "INFO - hello"),
])
def test_set_logger_format_names_the_earlier_line_layouts(tmp_path, format, line):
    log.set_logger(level="info", logfile=str(tmp_path / "train.log"), format=format).info("hello")
    assert line in (tmp_path / "train.log").read_text()


def test_set_logger_an_unknown_format_is_a_one_line_error():
    with pytest.raises(ConfigError, match="unknown format 'fancy'; use one of 'simple', 'name'"):
        log.set_logger(format="fancy")


def test_set_logger_rotation_by_size_moves_the_full_file_aside(tmp_path):
    logger = log.set_logger(level="info", logfile=str(tmp_path / "train.log"), rotation="1 KB")
    for line in range(40):
        logger.info("line %02d %s", line, "x" * 60)
    rotated = sorted(p for p in os.listdir(tmp_path) if p.startswith("train.") and p != "train.log")
    assert rotated and all(os.path.getsize(tmp_path / p) <= 1000 for p in [*rotated, "train.log"])
    text = "".join((tmp_path / p).read_text() for p in [*rotated, "train.log"])
    assert [f"line {n:02d}" in text for n in range(40)] == [True] * 40


def test_set_logger_rotation_by_time_starts_a_new_file_after_the_interval(tmp_path):
    logger = log.set_logger(level="info", logfile=str(tmp_path / "train.log"),
                            rotation=datetime.timedelta(milliseconds=50))
    logger.info("first")
    time.sleep(0.06)
    logger.info("second")
    assert (tmp_path / "train.log").read_text().strip().endswith("second")
    assert "first" not in (tmp_path / "train.log").read_text() and len(os.listdir(tmp_path)) == 2


def test_set_logger_retention_keeps_that_many_rotated_files(tmp_path):
    logger = log.set_logger(level="info", logfile=str(tmp_path / "train.log"), rotation="200 B", retention=2)
    for line in range(30):
        logger.info("line %02d %s", line, "x" * 60)
    assert len(os.listdir(tmp_path)) == 3  # the log and the 2 newest rotated files
    assert "line 29" in (tmp_path / "train.log").read_text()


def test_set_logger_retention_by_age_removes_older_rotated_files(tmp_path):
    old = tmp_path / "train.2020-01-01_00-00-00_000000.log"
    old.write_text("from long ago\n")
    os.utime(old, (time.time() - 3 * 86400, time.time() - 3 * 86400))
    logger = log.set_logger(level="info", logfile=str(tmp_path / "train.log"), rotation="200 B",
                            retention="2 days")
    for line in range(10):
        logger.info("line %02d %s", line, "x" * 60)
    assert not old.exists() and len(os.listdir(tmp_path)) > 2


@pytest.mark.parametrize("keywords, message", [
    ({"rotation": "often"}, "cannot read rotation='often'; give a size ('10 MB'), a time ('1 days'"),
    ({"rotation": "1 days", "retention": "forever"}, "cannot read retention='forever'"),
    ({"retention": "7 days"}, "retention='7 days' needs rotation"),
])
def test_set_logger_unreadable_rotation_or_retention_is_a_one_line_error(tmp_path, keywords, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        log.set_logger(level="info", logfile=str(tmp_path / "train.log"), **keywords)
    assert not os.listdir(tmp_path)


# ---------------------------------------------------------------------- create_dir
def test_create_dir_with_a_second_folder_creates_it_inside_the_first(tmp_path):
    assert file_utils.create_dir(str(tmp_path), "log") == str(tmp_path / "log")
    assert (tmp_path / "log").is_dir()


def test_create_dir_with_a_filename_returns_its_path_in_the_folder_without_creating_the_file(tmp_path):
    path = file_utils.create_dir(str(tmp_path), "log", "train.log")
    assert path == str(tmp_path / "log" / "train.log")
    assert (tmp_path / "log").is_dir() and not os.path.exists(path)
    assert file_utils.create_dir(str(tmp_path / "model"), None, "best.pth") == str(tmp_path / "model" / "best.pth")


# ---------------------------------------------------------------------- get_scheduler
def lrs(**options):
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=LR)
    scheduler = get_scheduler(options.pop("scheduler", "cosine"), optimizer, LR, EPOCHS, STEPS, **options)
    used = []
    for batch in range(EPOCHS * STEPS):
        used.append(optimizer.param_groups[0]["lr"])
        scheduler.on_batch_end(batch % STEPS)
    return used


def test_cosine_with_one_cycle_is_the_plain_cosine():
    total = EPOCHS * STEPS
    curve = lrs()
    assert curve[total // 2] == pytest.approx(LR * (1 + math.cos(math.pi * 0.5)) / 2)


def test_cosine_with_num_cycles_falls_rises_and_falls_again():
    total = EPOCHS * STEPS
    curve = lrs(num_cycles=2)
    assert curve[0] == pytest.approx(LR)
    assert curve[total // 3] == pytest.approx(0.0, abs=1e-12) and curve[2 * total // 3] == pytest.approx(LR)
    assert min(curve[total // 3:]) == pytest.approx(0.0, abs=1e-12) and curve[-1] < 0.01 * LR


def test_cosine_decay_damps_the_amplitude_as_the_earlier_cosine_lr_did():
    total = EPOCHS * STEPS
    curve = lrs(num_cycles=2, decay=0.5)
    # the earlier CosineLR: lr * decay ** ((num_cycles - 0.5) * progress)
    assert curve[2 * total // 3] == pytest.approx(LR * 0.5 ** (1.5 * 2 / 3))
    assert lrs(decay=1.0) == lrs()


def test_exp_decay_falls_by_decay_to_the_50th_over_the_run():
    curve = lrs(scheduler="exp", decay=0.9)
    last = EPOCHS * STEPS - 1
    assert curve[last] == pytest.approx(LR * 0.9 ** (50 * last / (EPOCHS * STEPS)))


def test_decay_with_a_schedule_that_has_none_is_ignored_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="basetrainer"):
        curve = lrs(scheduler="multi-step", milestones=[3], decay=0.5, num_cycles=2)
    assert curve == lrs(scheduler="multi-step", milestones=[3])
    assert "num_cycles and decay are ignored by scheduler multi-step" in caplog.text


@pytest.mark.parametrize("options, message", [
    ({"num_cycles": 0}, "num_cycles must be a positive integer, got 0"),
    ({"decay": -1.0}, "decay must be > 0, got -1.0"),
    ({"scheduler": "exp", "decay": 0.9, "gamma": 0.9}, "takes gamma .* or decay .*, not both"),
])
def test_bad_num_cycles_or_decay_is_a_config_error(options, message):
    with pytest.raises(ConfigError, match=message):
        lrs(**options)


# ---------------------------------------------------------------------- get_optimizer
def model_with_bias():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))


def test_get_optimizer_reads_the_order_of_2023_on_parameters_first():
    model, extra = model_with_bias(), nn.Parameter(torch.zeros(2))
    optimizer = get_optimizer(model, [extra], "SGD", 0.2, momentum=0.8, weight_decay=1e-4)
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["lr"] == 0.2
    assert optimizer.defaults["momentum"] == 0.8
    assert any(p is extra for group in optimizer.param_groups for p in group["params"])


def test_get_optimizer_reads_the_first_order_with_split_params_third():
    optimizer = get_optimizer(model_with_bias(), "AdamW", 0.01, True, weight_decay=1e-2)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert sorted(group["weight_decay"] for group in optimizer.param_groups) == [0.0, 1e-2]


def test_get_optimizer_reads_its_own_order_with_momentum_and_weight_decay():
    optimizer = get_optimizer(model_with_bias(), "SGD", 0.3, 0.5, 1e-3)
    assert (optimizer.defaults["lr"], optimizer.defaults["momentum"], optimizer.defaults["weight_decay"]) == \
        (0.3, 0.5, 1e-3)


def test_get_optimizer_refuses_an_argument_given_twice():
    with pytest.raises(TypeError, match="multiple values for argument 'lr'"):
        get_optimizer(model_with_bias(), "SGD", 0.1, lr=0.2)
