"""``configs/config.yaml``, ``configs/detection.yaml``, ``configs/text.yaml`` and
``docs/reference/configuration.md``, written from the declared settings.

::

    python -m basetrainer.tasks.reference    # from the repository root: rewrites the four files

The loop's keys come from :mod:`basetrainer.engine.settings`, the keys every task shares from
:mod:`.common.settings`, the classification task's from :mod:`.classification.settings`, the detection task's from
:mod:`.detection.settings`, the text task's from :mod:`.text.settings`; a test checks that the files in the
repository are what this writes.
"""
import os

from ..config.reference import markdown_reference, yaml_reference
from ..engine.settings import LOOP_SETTINGS
from ..utils.file_utils import write_text_atomic
from .classification.settings import CONFIG_YAML_GROUPS, GROUPS, TASK_SETTINGS
from .detection import settings as detection
from .text import settings as text

CONFIG_YAML = os.path.join("configs", "config.yaml")
CONFIGURATION_MD = os.path.join("docs", "reference", "configuration.md")
DETECTION_YAML = os.path.join("configs", "detection.yaml")
TEXT_YAML = os.path.join("configs", "text.yaml")

DETECTION_YAML_HEADER = """
Object detection: the settings of examples/detection.py and `basetrainer train --task detection`.

  python examples/detection.py -c configs/detection.yaml [--flag value ...] [key=value ...]

Precedence, highest first: key=value overrides, flags typed on the command line, this
file, the defaults (the same values as here). These defaults train fcos_tiny on the
generated digit scenes (data/digit_scenes, written on first use) on a CPU.
Written by `python -m basetrainer.tasks.reference` from basetrainer/engine/settings.py and
basetrainer/tasks/detection/settings.py: change a key there, not here.
"""

DETECTION_INTRO = """
## Keys of the detection task

`examples/detection.py` and `basetrainer train --task detection` take these, and no others
(`configs/detection.yaml` holds them at their defaults; the [detection guide](../guides/detection.md)
says what a run does with them). The loop's keys appear again where the task sets another default.

"""

TEXT_YAML_HEADER = """
Fine-tuning a pretrained transformer: the settings of `basetrainer train --task text` and
examples/finetune_text.py (which sets its own num_epochs, lr, work_dir and lora).

  basetrainer train --task text -c configs/text.yaml [--flag value ...] [key=value ...]

Precedence, highest first: key=value overrides, flags typed on the command line, this
file, the defaults (the same values as here). These defaults fine-tune a tiny Llama-like
model (data/text/tiny-llama, written on first use) on the bundled instructions on a CPU,
offline; give model a save_pretrained folder or a hub name for a real one.
Written by `python -m basetrainer.tasks.reference` from basetrainer/engine/settings.py and
basetrainer/tasks/text/settings.py: change a key there, not here.
"""

TEXT_INTRO = """
## Keys of the text task

`basetrainer train --task text` and `examples/finetune_text.py` take these, and no others
(`configs/text.yaml` holds them at their defaults; the [text guide](../guides/text.md) says
what a run does with them). The loop's keys appear again where the task sets another default.

"""

CONFIG_YAML_HEADER = """
Image classification: the settings of examples/example.py and `basetrainer train`.

  python examples/example.py -c configs/config.yaml [--flag value ...] [key=value ...]

Precedence, highest first: key=value overrides, flags typed on the command line, this
file, the defaults (the same values as here). Unknown keys, values of the wrong type and
values out of range are errors, found before anything starts. These defaults train on the
bundled handwritten digits on a laptop CPU in about a minute (about 98% test accuracy).
Written by `python -m basetrainer.tasks.reference` from basetrainer/engine/settings.py and
basetrainer/tasks/classification/settings.py: change a key there, not here.
"""

CONFIGURATION_MD_INTRO = """# Configuration reference

Every config key basetrainer reads, with its default, what it accepts and its unit. This
page is written by `python -m basetrainer.tasks.reference` from the declarations
(`basetrainer/engine/settings.py`, `basetrainer/tasks/classification/settings.py`), as are
`configs/config.yaml` and `basetrainer train --help`; a test keeps them in step.

A run's settings come from, highest first:

1. `key=value` overrides (or `--opts key=value ...`), nested with dots (`optim.lr=0.1`),
   anywhere on the command line;
2. flags typed on the command line (`--lr 0.1`);
3. the YAML file given with `-c`;
4. the defaults below.

```bash
python examples/example.py -c configs/config.yaml --lr 0.01 scheduler=multi-step amp=bf16
basetrainer train -c configs/config.yaml --train_data /data/train --test_data /data/val
```

Values are checked before anything starts, however they arrive (the YAML file of `-c`, a
flag, `key=value`, a dict or an `argparse.Namespace` handed to a trainer): a value a key
does not accept ends the run with one line naming the key, the value, where it came from
and what is allowed. YAML is read strictly: words and numbers that YAML 1.1 (PyYAML) and
YAML 1.2 read differently (`yes`, `no`, `on`, `off`, `010`, `1:30`, `1_000`, dates), a key
given twice, `key:value` without a space, aliases, tabs and several documents are errors
naming the file and line. Quote a text that looks like something else (`'yes'`), write
`null` (or `~`) for nothing: `None` is text in YAML. In your own scripts,
{func}`basetrainer.config.parser_config` merges argparse and YAML the same way and keeps
every key of your YAML (strict checking is opt-in, `strict=True`; `schema=` checks values
against declared settings).

## Keys every trainer reads

`EngineTrainer` reads these from any config (`LoopOptions`); keys it does not read are your
own and pass through. Missing or null, a key takes its default.

"""

TASK_INTRO = """
## Keys of the classification task

`examples/example.py` and `basetrainer train` take these, and no others (an unknown key is
an error that suggests the closest known one). The loop's keys above appear again where the
task sets another default. Keys with a flag can also be typed as `--key value`.

### timm backbones

`net_type: timm/<name>` builds any model of `timm.list_models()` (`pip install "basetrainer[timm]"`), with random
weights, offline, and a `num_classes`-way head: `timm/resnet10t`, `timm/convnext_atto`, `timm/vit_tiny_patch16_224`.
`pretrained` takes a weights file, such as `timm.create_model(name, pretrained=True).state_dict()` saved with
`torch.save` (a head of another size keeps its fresh weights); `pretrained: true` is refused, as it would download.
Left null, `input_size`, `rgb_mean` and `rgb_std` are the model's own, from its `pretrained_cfg` (`timm/resnet10t`:
176 x 176, ImageNet's mean and std), the start-up line says so, and the run's `config.yaml` holds them; a model
made for one input size (a ViT's patch grid) is made for the `input_size` given. AMP, `channels_last`, `compile`,
FSDP (the repeated block, timm's `BasicBlock` or `Block`, is the unit), `activation_checkpointing: [BasicBlock]`,
`basetrainer export` and `basetrainer predict` work as with torchvision's models; `use_prune` prunes a
convolutional network and refuses, in one line, one with attention layers. An unknown name is refused before any
work, naming the closest.

"""


def config_yaml() -> str:
    return yaml_reference(TASK_SETTINGS, CONFIG_YAML_GROUPS, CONFIG_YAML_HEADER)


def detection_yaml() -> str:
    return yaml_reference(detection.TASK_SETTINGS, detection.CONFIG_YAML_GROUPS, DETECTION_YAML_HEADER)


def text_yaml() -> str:
    return yaml_reference(text.TASK_SETTINGS, text.CONFIG_YAML_GROUPS, TEXT_YAML_HEADER)


def configuration_md() -> str:
    loop = markdown_reference(LOOP_SETTINGS, {group: title for group, title in GROUPS.items()
                                              if any(s.group == group for s in LOOP_SETTINGS)}, flags=False)
    return (CONFIGURATION_MD_INTRO + loop + TASK_INTRO + markdown_reference(TASK_SETTINGS, GROUPS)
            + DETECTION_INTRO + markdown_reference(detection.TASK_SETTINGS, detection.GROUPS)
            + TEXT_INTRO + markdown_reference(text.TASK_SETTINGS, text.GROUPS))


def main(root="."):
    """Writes the references under ``root`` (the repository)."""
    for path, written in ((CONFIG_YAML, config_yaml()), (DETECTION_YAML, detection_yaml()),
                          (TEXT_YAML, text_yaml()), (CONFIGURATION_MD, configuration_md())):
        write_text_atomic(os.path.join(root, path), written)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
