"""Configuration: the command line, a YAML file and the parser's defaults merged into one ``Config``.

Precedence, highest first::

    KEY=VALUE / --opts KEY=VALUE          (any key, nested with dots: optim.lr=0.1)
    flags typed on the command line       (--lr 0.1, -c x.yaml)
    the YAML file named by -c/--config_file
    the parser's defaults

Keys that only the YAML file has are kept as they are. Checking keys and types is opt-in
(``strict=True``): scripts of the old library rely on every YAML key passing through. A
reader that declares its keys (``schema=``) has every value checked against the declaration,
wherever it came from.

One module a job: ``mapping`` (the ``Config`` dict), ``yaml_files`` (reading and writing
it), ``strict_yaml`` (what a YAML file may hold), ``overrides`` (``KEY=VALUE``), ``kinds``
and ``schema`` (declared settings: what a key accepts, its default, unit and help),
``checking`` (strict checking against defaults' types), ``flags`` (command-line flags made
from settings), ``command_line`` (``parser_config``), ``reference`` (the configuration
reference written from settings) and ``legacy`` (the other names of the old ``setup_config``).
"""
from .checking import check_config
from .command_line import parser_config
from .mapping import Config, option, to_plain
from .overrides import add_override_arguments, apply_overrides
from .yaml_files import load_config, save_config

__all__ = [
    "Config",
    "option",
    "parser_config",
    "load_config",
    "save_config",
    "apply_overrides",
    "check_config",
    "add_override_arguments",
    "to_plain",
]
