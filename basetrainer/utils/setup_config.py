"""Old import path of :mod:`basetrainer.config`, with the other names of the earlier library's module."""
from basetrainer.config import Config, add_override_arguments, apply_overrides, check_config, parser_config, save_config
from basetrainer.config.legacy import (
    Dict2Obj,
    create_workspace,
    dict2easy,
    easy2dict,
    load_config,
    parser_config_file,
    parser_config_name,
    parser_work_space,
    print_dict,
    update_dict,
)

__all__ = [
    "Config",
    "Dict2Obj",
    "add_override_arguments",
    "apply_overrides",
    "check_config",
    "create_workspace",
    "dict2easy",
    "easy2dict",
    "load_config",
    "parser_config",
    "parser_config_file",
    "parser_config_name",
    "parser_work_space",
    "print_dict",
    "save_config",
    "update_dict",
]
