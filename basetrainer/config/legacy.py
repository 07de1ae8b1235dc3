"""The earlier library's ``basetrainer.utils.setup_config``: its names, over this package.

``parser_config`` and ``save_config`` are this package's own; the rest are below. Unlike
the old ones they print nothing (but ``print_dict``) and return ``Config`` where the old
ones returned an EasyDict.
"""
import os

from basetrainer.utils.file_utils import copy_file_to_dir, create_dir, get_time, write_text_atomic

from . import yaml_files
from .checking import check_config
from .command_line import parser_config
from .mapping import Config, deep_merge, to_plain
from .overrides import add_override_arguments, apply_overrides
from .yaml_files import save_config

# EasyDict and Dict2Obj gave attribute access to a dict, as Config does.
dict2easy = Dict2Obj = Config
easy2dict = to_plain


def load_config(config_file="config.yaml", easy=False):
    """:func:`basetrainer.config.load_config`; ``easy`` is ignored: a ``Config`` has attribute access already."""
    return yaml_files.load_config(config_file)


def update_dict(cfg1, cfg2):
    """``cfg1`` updated by ``cfg2``, nested dicts merged key by key, as a new ``Config``."""
    return Config(deep_merge(cfg1, cfg2))


def parser_config_file(config, config_file, cfg_updata=True):
    """``config`` merged with the YAML file ``config_file``: ``config`` wins, or the file with ``cfg_updata=False``."""
    file_cfg = yaml_files.load_config(config_file)
    return update_dict(file_cfg, config) if cfg_updata else update_dict(config, file_cfg)


def parser_work_space(work_dir, flags=(), time=True):
    """``work_dir/<flags joined by _>[_<time>]``, e.g. ``output/resnet18_20240131_154502``."""
    names = [flags] if isinstance(flags, str) else list(flags)
    if time:
        names.append(get_time())
    return os.path.join(work_dir, "_".join(str(name) for name in names if name))


def create_workspace(cfg, flags=(), is_main_process=True, backup=True):
    """Sets ``cfg.work_dir`` to a new ``parser_work_space`` with ``model`` and ``log`` folders (``cfg.model_dir``,
    ``cfg.log_dir``); the main process creates them and, with ``backup``, copies ``cfg.config_file`` in."""
    cfg.work_dir = parser_work_space(cfg.work_dir, flags, time=True)
    cfg.model_dir = os.path.join(cfg.work_dir, "model")
    cfg.log_dir = os.path.join(cfg.work_dir, "log")
    if is_main_process:
        create_dir(cfg.model_dir)
        create_dir(cfg.log_dir)
        if backup:
            copy_file_to_dir(cfg.config_file, cfg.work_dir)
    return cfg


def print_dict(dict_data, save_path=None):
    """Prints ``key: value`` lines between rules of ``=``; also writes the lines to ``save_path`` if given."""
    lines = [f"{key}: {value}" for key, value in dict_data.items()]
    print("\n".join(["=" * 60, *lines, "=" * 60]))
    if save_path is not None:
        write_text_atomic(save_path, "".join(line + "\n" for line in lines))


def parser_config_name(config, key="", join="_"):
    raise NotImplementedError(
        "setup_config.parser_config_name was removed; build the name with "
        "'_'.join(str(name) for name in cfg[key] if name)"
    )


__all__ = ["Config", "Dict2Obj", "add_override_arguments", "apply_overrides", "check_config", "create_workspace",
           "dict2easy", "easy2dict", "load_config", "parser_config", "parser_config_file", "parser_config_name",
           "parser_work_space", "print_dict", "save_config", "update_dict"]
