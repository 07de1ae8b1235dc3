"""``key=value`` overrides: the arguments that take them and setting them on a ``Config``."""
from collections.abc import Mapping

import yaml

from basetrainer.errors import ConfigError

from .mapping import Config
from .strict_yaml import YamlProblem
from .yaml_files import parse_yaml

# The dests add_override_arguments declares, each with the words that say, in an error,
# where its overrides came from: as the user typed them.
OVERRIDE_SOURCES = {"opts": "from --opts", "overrides": "from the command line"}


def add_override_arguments(parser):
    """Let ``parser`` take any config key: ``KEY=VALUE ...`` at the end, or ``--opts KEY=VALUE ...``.

    They land in ``args.overrides`` and ``args.opts``, which ``parser_config`` applies last.
    Returns ``parser``.
    """
    parser.add_argument("--opts", nargs="*", action="extend", default=[], metavar="KEY=VALUE",
                        help="the same as KEY=VALUE, for use after a flag that takes several values")
    parser.add_argument("overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help="set any config key; the value is read as YAML (0.1, [3,6], true, null) "
                             "and KEY.SUB=VALUE sets a nested key")
    return parser


def apply_overrides(cfg, overrides):
    """Set ``key=value`` strings on ``cfg`` in place and return it.

    Values are read as YAML, strictly (``lr=0.1`` is a float, ``milestones=[3,6]`` a list,
    ``amp=bf16`` a string, ``resume=`` None, ``use_prune=yes`` an error: write true); dots
    reach nested keys (``optim.lr=0.1``).
    """
    for key, value in map(parse_override, overrides):
        set_dotted(cfg, key, value)
    return cfg


def parse_override(text):
    """``"optim.lr=0.1"`` -> ``("optim.lr", 0.1)``."""
    key, sep, raw = str(text).partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"cannot read override {text!r}; write it as key=value, e.g. lr=0.01 or optim.lr=0.01")
    try:
        value = parse_yaml(raw)
    except YamlProblem as error:
        raise ConfigError(f"cannot read override {text!r}: {error.problem}") from None
    except yaml.YAMLError:
        value = raw  # not YAML (e.g. an unbalanced bracket in a path): take it as written
    return key, value


def set_dotted(cfg, key, value):
    """``cfg[a][b] = value`` for ``key`` ``"a.b"``, creating missing levels (and levels that are null: a mapping
    whose default is none, as ``parallel.mesh``)."""
    *parents, leaf = key.split(".")
    node = cfg
    for depth, name in enumerate(parents):
        if node.get(name) is None:
            node[name] = Config()
        child = node[name]
        if not isinstance(child, Mapping):
            prefix = ".".join(parents[: depth + 1])
            raise ConfigError(
                f"cannot set '{key}': '{prefix}' is a {type(child).__name__}, not a mapping; set '{prefix}' itself"
            )
        node = child
    node[leaf] = value


def nested(key, value):
    """``"a.b", 1`` -> ``{"a": {"b": 1}}``."""
    for name in reversed(key.split(".")):
        value = {name: value}
    return value


def overrides_first(argv, keys):
    """``argv`` with every ``KEY=VALUE`` token whose key (before any dot) is one of ``keys`` moved to the front,
    where no flag can take it for one of its values: ``--gpu_id 0 1 strategy=fsdp`` reads as ``strategy=fsdp
    --gpu_id 0 1``, not as a third GPU named "strategy=fsdp". The values of ``--opts`` and whatever follows
    ``--`` stay where they are; the overrides keep their order."""
    argv, moved, kept, after_opts = list(argv), [], [], False
    for index, token in enumerate(argv):
        if token == "--":
            kept += argv[index:]
            break
        if token.startswith("-"):
            after_opts = token == "--opts"
        key, sep, _ = token.partition("=")
        (moved if sep and not after_opts and key.split(".")[0] in keys else kept).append(token)
    return [*moved, *kept]
