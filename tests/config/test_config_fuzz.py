"""Property-based fuzzing of the configuration, without training: whatever values, YAML documents or command
lines a user gives, each is accepted (and then every part of a run builds from it) or refused with one
line; never another exception, never a file written. The entry points' own runs are fuzzed in
tests/e2e/test_fuzz_entry_points.py."""
import argparse
import contextlib
import io
import math
import os

import pytest
import torch
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from basetrainer.callbacks import EMA, EarlyStopping
from basetrainer.config import load_config, option
from basetrainer.config.kinds import Boolean, Choice, Fields, Integer, ListOf, Number, OneOf
from basetrainer.criterion.criterion import get_criterion
from basetrainer.distributed import comm
from basetrainer.engine.options import LoopOptions
from basetrainer.engine.settings import LOOP_SETTINGS
from basetrainer.errors import ConfigError, LaunchError
from basetrainer.optimizer.build_optimizer import get_optimizer
from basetrainer.scheduler.build_scheduler import get_scheduler
from basetrainer.tasks.classification import build_transform
from basetrainer.tasks.classification.config import get_parser, parse_config
from basetrainer.tasks.classification.settings import TASK_SETTINGS

# 1,000 cases take 15-20 s: in the slow tier, beside the entry points' fuzz, so that the fast tier stays under 2 minutes
pytestmark = pytest.mark.slow

CPU = torch.device("cpu")
CASES = 250  # per test below; four tests: 1,000 generated cases, the same ones every run (derandomized)
FUZZ = settings(max_examples=CASES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

WORDS = ["", " ", "none", "None", "null", "auto", "true", "yes", "off", "ddp", "FSDP", "resnet18", "alexnet",
         "vit_b_16", "SGD", "adamw", "cosine", "multi-step", "step", "exp", "bf16", "fp8", "raise", "skip", "warn",
         "tensorboard", "wandb", "L1", "Slim", "tcp://127.0.0.1:29500", "tcp://h:99999", "tcp://[::1", "../../etc",
         "\x00", "é", "🙂", "1e-3", "0x1F", "010", "1:30", "2024-01-01", "-1", "nan", ".inf"]
EDGE_NUMBERS = [0, -1, 1, 2, 3, 4096, 4097, 2 ** 31, 2 ** 32, 2 ** 63, 2 ** 64, 10 ** 30, 0.0, -0.0, 0.5, 1.0, 1e-300,
                1e300, math.nan, math.inf, -math.inf]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.sampled_from(EDGE_NUMBERS), st.sampled_from(WORDS),
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.text(min_size=200, max_size=300))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=5) | st.lists(
    st.integers(min_value=-3, max_value=5), min_size=50, max_size=200)
TASK_KEYS = [name for name in TASK_SETTINGS.names() if name != "config_file"]
KEYS = st.sampled_from(TASK_KEYS) | st.from_regex(r"[a-z][a-z_.]{0,14}", fullmatch=True)


NAMES = {"net_type": ["resnet18", "mobilenet_v3_small", "alexnet", "vit_b_16", "maxvit_t", "resnet-18", "ResNet1"],
         "optim_type": ["SGD", "adam", "AdamW", "rmsprop", "lamb"], "loss_type": ["CELoss", "focal", "mse", "hinge"],
         "scheduler": ["cosine", "multi-step", "step", "exp", "poly", "one-cycle", "constant", "linear"],
         "prune_mod": ["L1", "slim", "Level", "L3"], "dist_url": ["auto", "tcp://127.0.0.1:29500", "tcp://h:0", "udp://h:1"]}


def declared_values(name, kind):
    """Values inside and just outside what ``kind`` accepts, read off its declaration."""
    if isinstance(kind, Integer):
        low = -3 if kind.minimum is None else kind.minimum
        high = low + 100 if kind.maximum is None else kind.maximum
        return st.sampled_from([low - 1, low, low + 1, high, high + 1]) | st.integers(low, high)
    if isinstance(kind, Number):
        low = -1.0 if kind.minimum is None else kind.minimum
        high = low + 10.0 if kind.maximum is None else kind.maximum
        return st.sampled_from([low, high, low - 1e-9, high + 1e-9]) | st.floats(low, high)
    if isinstance(kind, ListOf):
        length = st.integers(max(0, kind.min_length - 1), (kind.max_length or kind.min_length + 3) + 1)
        return length.flatmap(lambda n: st.lists(declared_values(name, kind.item), min_size=n, max_size=n))
    if isinstance(kind, OneOf):
        return st.one_of([declared_values(name, inner) for inner in kind.kinds])
    if isinstance(kind, Choice):
        return st.sampled_from([*kind.choices, "other"])
    if isinstance(kind, Boolean):
        return st.booleans()
    if isinstance(kind, Fields):  # some of its fields, or a misspelt one
        fields = {field: declared_values(field, inner) for field, (inner, _) in kind.fields.items()}
        return st.fixed_dictionaries({}, optional={**fields, "peroid": st.integers(0, 3)})
    return st.sampled_from(NAMES.get(name, ["x", "", "runs/a", "tcp://h:1"]))


def declared_or_hostile(setting):
    values = declared_values(setting.name, setting.kind) | st.just(setting.default)
    return st.one_of(values, values, values, VALUES)


CONFIGS = st.dictionaries(KEYS, VALUES, max_size=3) | st.lists(st.sampled_from(TASK_KEYS), min_size=1, max_size=4).flatmap(
    lambda keys: st.fixed_dictionaries({key: declared_or_hostile(TASK_SETTINGS[key]) for key in keys}))


@pytest.fixture
def quiet_folder(tmp_path, monkeypatch):
    """The current folder, which no case may write into."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def one_line(error) -> str:
    message = str(error)
    assert message and "\n" not in message and "Traceback" not in message
    return message


def as_override(key, value) -> str:
    """``key=value`` with the value written as YAML, as a user would type it."""
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10 ** 6)
    return f"{key}={text.strip().removesuffix('...').strip()}"


def build_parts(cfg):
    """Everything of a run that is made from the config alone: a config the checks accept must build them all."""
    options = LoopOptions.from_config(cfg, CPU)
    build_transform(cfg, train=True), build_transform(cfg, train=False)
    optimizer = get_optimizer(torch.nn.Linear(2, 2), optim_type=cfg.optim_type, lr=cfg.lr, momentum=cfg.momentum,
                              weight_decay=cfg.weight_decay)
    get_scheduler(cfg.scheduler, optimizer=optimizer, lr_init=cfg.lr, num_epochs=cfg.num_epochs, num_steps=3,
                  milestones=cfg.milestones, num_warn_up=cfg.num_warn_up, max_iters=cfg.max_iters)
    get_criterion(cfg.loss_type, 2)
    if cfg.ema_decay > 0:
        EMA(decay=cfg.ema_decay)
    if cfg.early_stopping_patience > 0:
        EarlyStopping("Acc", patience=cfg.early_stopping_patience)
    return options


@FUZZ
@given(values=CONFIGS)
def test_any_key_value_overrides_are_accepted_and_build_or_are_refused_in_one_line(quiet_folder, values):
    argv = [as_override(key, value) for key, value in values.items()]
    try:
        cfg = parse_config(argv)
    except ConfigError as error:
        event("refused")
        message = one_line(error)
        assert any(where in message for where in ("from the command line", "override", "(the default)"))
        assert any(key.split(".")[0] in message for key in values)
    else:
        event("accepted")
        build_parts(cfg)
    assert os.listdir(quiet_folder) == []


def yaml_documents():
    """Config files as people edit them: settings of any value, and lines broken in the ways YAML lets through."""
    setting = st.sampled_from(TASK_KEYS).flatmap(lambda key: declared_or_hostile(TASK_SETTINGS[key]).map(
        lambda value: as_override(key, value).replace("=", ": ", 1)))
    line = st.one_of(
        setting, setting, setting, setting, setting, setting,
        st.builds(lambda key, value: as_override(key, value).replace("=", ": ", 1), KEYS, VALUES),
        st.builds(lambda key, word: f"{key}:{word}", KEYS, st.sampled_from(WORDS)),
        st.builds(lambda key, word: f"{key}: {word}", KEYS, st.sampled_from(WORDS)),
        st.sampled_from(["---", "...", "\tlr: 0.1", "  indented: 1", "- item", "<<: {lr: 0.1}", "base: &b [1]",
                         "copy: *b", "? [a]", ": 1", "lr: !!python/object/apply:os.system ['true']", "x: !!binary aGk=",
                         "lr: 0.1 # comment", "# only a comment", "on: 1", "1: a", "lr: [0.1", "lr: 0.1\r", "\ufeff"]),
        st.text(max_size=30))
    return st.lists(line, max_size=8).map("\n".join)


@pytest.fixture
def yaml_file(tmp_path_factory):
    return tmp_path_factory.mktemp("yaml") / "c.yaml"


@FUZZ
@given(text=yaml_documents())
def test_any_yaml_config_file_is_read_or_refused_naming_the_file(yaml_file, quiet_folder, text):
    path = yaml_file
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        cfg = parse_config(["-c", str(path)])
    except ConfigError as error:
        event("refused")
        message = one_line(error)
        assert str(path) in message or "config key" in message
    else:
        event("accepted")
        assert isinstance(load_config(path), dict)
        build_parts(cfg)
    assert os.listdir(quiet_folder) == []


@FUZZ
@given(values=st.dictionaries(st.from_regex(r"[a-z_]{1,10}", fullmatch=True), VALUES, max_size=2) | st.lists(
    st.sampled_from(LOOP_SETTINGS.names()), min_size=1, max_size=5).flatmap(
    lambda keys: st.fixed_dictionaries({key: declared_or_hostile(LOOP_SETTINGS[key]) for key in keys})))
@example(values={"num_epochs": 1, "parallel": {"pipeline": {}}})  # a check across keys, found by the fuzz
def test_any_namespace_a_user_script_hands_the_trainer_gives_loop_options_or_one_line(values):
    namespace = argparse.Namespace(**values)
    try:  # what EngineTrainer.__init__ does first
        device = comm.get_device(option(namespace, "gpu_id", None))  # on a GPU machine, a missing GPU: LaunchError
        options = LoopOptions.from_config(namespace, device)
    except (ConfigError, LaunchError) as error:
        event("refused")
        message = one_line(error)
        assert any(key in message for key in values)  # what it is about
        if message.startswith("config key"):  # a value its key does not accept: and where the value was
            assert "(in the trainer's config)" in message
    else:
        event("accepted")
        for key, value in values.items():
            if key in LOOP_SETTINGS and value is not None:
                LOOP_SETTINGS[key].check(value)  # only what the declarations accept gets through
        assert options == LoopOptions.from_config(dict(values), device)


def flag_and_values(setting):
    """``--key value...`` as a user types a flag of ``setting``, with values in and around what it accepts."""
    flag = f"--{setting.name}" if "names" not in setting.flag else setting.flag["names"][-1]
    if "action" in setting.flag or isinstance(setting.kind, Boolean):
        return st.just([flag])
    return declared_values(setting.name, setting.kind).map(
        lambda value: [flag, *map(str, value if isinstance(value, list) else [value])])


FLAGGED = [setting for setting in TASK_SETTINGS if setting.flag is not None]


def command_lines():
    parser = get_parser()
    flags = [option for action in parser._actions for option in action.option_strings if option not in ("-h", "--help")]
    noise = st.one_of(st.sampled_from(flags), st.sampled_from(WORDS), st.sampled_from([str(n) for n in EDGE_NUMBERS]),
                      st.builds(as_override, KEYS, VALUES),
                      st.sampled_from(["--opts", "--", "-", "--nope", "-x", "=", "--lr=", "--lr=1", "--no-progress"]),
                      st.text(max_size=10)).map(lambda token: [token])
    typed = st.sampled_from(FLAGGED).flatmap(flag_and_values)
    override = st.sampled_from(TASK_KEYS).flatmap(
        lambda key: declared_or_hostile(TASK_SETTINGS[key]).map(lambda value: [as_override(key, value)]))
    return st.lists(st.one_of(typed, typed, override, override, noise), max_size=6).map(
        lambda groups: [token for group in groups for token in group])


@FUZZ
@given(argv=command_lines())
def test_any_train_command_line_is_parsed_or_refused_in_one_line_with_exit_code_2(quiet_folder, argv):
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            cfg = parse_config(argv, prog="basetrainer train")
    except SystemExit as stop:  # argparse's own refusal
        event("refused by argparse")
        lines = stderr.getvalue().splitlines()
        assert stop.code == 2 and len(lines) == 1 and lines[0].startswith("error: basetrainer train: ")
    except ConfigError as error:
        event("refused")
        one_line(error)
    else:
        event("accepted")
        build_parts(cfg)
    assert os.listdir(quiet_folder) == []
