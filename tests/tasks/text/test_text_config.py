"""The text task's config: configs/text.yaml is what the declarations write, and keys that do not fit together are
refused in one line before any work."""
import pathlib

import pytest

from basetrainer.errors import ConfigError
from basetrainer.tasks import reference
from basetrainer.tasks.text.config import parse_config

REPO = pathlib.Path(__file__).resolve().parents[3]


def test_configs_text_yaml_is_what_the_declarations_write():
    written = (REPO / reference.TEXT_YAML).read_text(encoding="utf-8")
    assert written == reference.text_yaml(), "run: python -m basetrainer.tasks.reference"


def test_running_with_text_yaml_gives_the_same_config_as_running_without_it():
    with_file = parse_config(["-c", str(REPO / reference.TEXT_YAML)])
    without = parse_config([])
    with_file.pop("config_file")
    without.pop("config_file")
    assert with_file == without


def test_lora_fields_are_read_and_checked():
    cfg = parse_config(["lora.r=8", "lora.target_modules=[all-linear]"])
    assert cfg.lora == {"r": 8, "alpha": 16.0, "dropout": 0.05, "target_modules": ["all-linear"],
                        "modules_to_save": None}
    with pytest.raises(ConfigError, match="lora"):
        parse_config(["lora.rank=8"])
    assert parse_config(["lora={r: 8}"]).lora["modules_to_save"] is None  # a mapping given in part


@pytest.mark.parametrize("arguments, message", [
    (["--task_type", "sequence_classification", "packing=true"], "packing True .*a classifier takes one text"),
    (["--task_type", "sequence_classification", "format=chat"], "format 'chat' .*a classifier reads a text"),
    (["monitor=Acc"], "monitor 'Acc' .*a causal LM's evaluation publishes loss and perplexity; monitor one"),
    (["--task_type", "sequence_classification", "monitor=perplexity"], "a classifier's evaluation publishes loss and "
                                                                        "Acc"),
])
def test_keys_that_do_not_fit_together_are_one_line(arguments, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(arguments)
