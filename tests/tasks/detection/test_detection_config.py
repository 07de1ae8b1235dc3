"""The detection task's config: configs/detection.yaml written from the declarations, and its checks."""
import pytest

from basetrainer.errors import ConfigError
from basetrainer.tasks import reference
from basetrainer.tasks.detection.config import get_parser, parse_config
from basetrainer.tasks.detection.settings import TASK_SETTINGS
from support import REPO


def test_configs_detection_yaml_is_what_the_declarations_write():
    written = (REPO / reference.DETECTION_YAML).read_text(encoding="utf-8")
    assert written == reference.detection_yaml(), "run: python -m basetrainer.tasks.reference"


def test_running_with_detection_yaml_gives_the_same_config_as_running_without_it():
    with_file = parse_config(["-c", str(REPO / reference.DETECTION_YAML)])
    without = parse_config([])
    with_file.pop("config_file"), without.pop("config_file")
    assert with_file == without


def test_the_parser_defaults_are_the_declared_defaults():
    parsed = vars(get_parser().parse_args([]))
    for key in ("opts", "overrides"):
        parsed.pop(key)
    assert parsed == TASK_SETTINGS.defaults()


REFUSED = {
    "an unknown detector": (["--net_type", "fcos_tny"], "did you mean 'fcos_tiny'"),
    "a scale range upside down": (["scale_jitter=[1.5,0.5]"], "write [low, high] with low <= high"),
    "test images without annotations": (["test_annotations=null"], "give both for an evaluation, or neither"),
    "a classification key": (["--train_data", "x"], "unrecognized arguments"),
    "num_classes of 0": (["num_classes=0"], "config key 'num_classes' expects an integer >= 1"),
}


@pytest.mark.parametrize("arguments, message", REFUSED.values(), ids=REFUSED.keys())
def test_a_bad_setting_is_refused_in_one_line_before_any_work(arguments, message, capsys):
    try:
        parse_config(arguments)
    except ConfigError as error:
        text = str(error)
    except SystemExit:  # argparse: an unknown flag
        text = capsys.readouterr().err.strip().splitlines()[-1]
    else:
        pytest.fail("accepted")
    assert message in text and "\n" not in text
