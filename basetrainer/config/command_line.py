"""``parser_config``: the parsed command line, the YAML file of ``-c`` and the parser's defaults merged."""
import argparse
import atexit
import contextlib
import io
import os
import shutil
import sys
import tempfile

from .checking import check_config, reference_defaults
from .mapping import Config
from .overrides import OVERRIDE_SOURCES, nested, parse_override, set_dotted
from .yaml_files import read_config, save_config

ARGS_FILE_NAME = "args_config.yaml"
_UNTYPED = object()  # what every dest holds before argv is parsed again


def parser_config(args, cfg_updata=True, *, parser=None, strict=False, known=None, argv=None, save_args=True,
                  schema=None):
    """Merge ``args`` (an argparse.Namespace) with the YAML file ``args.config_file`` into a ``Config``.

    A flag typed on the command line keeps its value; otherwise the YAML value wins;
    otherwise the parser's default. Keys only the YAML has are kept. The ``KEY=VALUE``
    overrides (``args.overrides`` and ``args.opts``) are applied last. ``cfg.config_file``
    is the file read.

    Args:
        cfg_updata: kept for old scripts. It used to let the YAML beat typed flags; typed flags
            now always win, whatever its value.
        parser: the ArgumentParser that made ``args``. With it, the flags typed are known
            exactly (short flags, abbreviations, ``--x=1``); without it, ``--name`` tokens of
            ``argv`` are taken as typed.
        strict: refuse keys of the YAML and the overrides that the parser does not declare (nor
            ``known``, nor ``schema``), and check values against the defaults' types; see ``check_config``.
        known: keys beyond the parser's dests, with defaults whose types are checked:
            nested dicts for nested keys, None for a key of any type.
        argv: the strings ``args`` was parsed from, if not ``sys.argv[1:]``.
        save_args: with no config file, write the config to ``args_config.yaml`` in a private
            temporary folder (removed at exit) and name it in ``cfg.config_file``, as the old
            library did: its scripts copy ``cfg.config_file`` into their work_dir. False
            leaves ``cfg.config_file`` None.
        schema: a :class:`~basetrainer.config.schema.Schema`: every value of a key it declares is
            checked against it, wherever it came from, and a refusal names the source (the file
            and line, the flag, the override); see :func:`merged_config`.
    """
    cfg, _ = merged_config(args, parser=parser, strict=strict, known=known, argv=argv, schema=schema)
    if not cfg.config_file and save_args:
        cfg.config_file = _save_to_private_folder(cfg)
    return cfg


def merged_config(args, *, parser=None, strict=False, known=None, argv=None, schema=None):
    """``(cfg, sources)``: :func:`parser_config`'s ``Config`` (without saving it anywhere) and, for each
    top-level key, where its value came from, in the words of an error message: ``"in c.yaml line 3"``,
    ``"from --lr"``, ``"from the command line"`` (a ``KEY=VALUE``), ``"from --opts"``, ``"the default"``."""
    values = dict(vars(args))
    overrides = _pop_overrides(values)
    argv = sys.argv[1:] if argv is None else list(argv)
    defaults = _declared_defaults(parser, values) if parser is not None else values
    typed = _typed_dests(values, defaults, parser, argv)

    config_file = values.get("config_file")
    file_cfg, lines = read_config(config_file) if config_file else (Config(), {})
    in_file = {key: f"in {config_file} line {line}" for key, line in lines.items()}
    check = _checker(schema, strict, defaults, known)
    check(file_cfg, in_file.get)

    cfg, sources = Config(), {}
    flags = _flag_names(parser)
    for key, value in values.items():
        from_file = key in file_cfg and key not in typed
        cfg[key] = file_cfg[key] if from_file else value
        sources[key] = in_file[key] if from_file else (f"from {flags.get(key, '--' + key)}" if key in typed
                                                       else "the default")
    for key, value in file_cfg.items():
        if key not in cfg:
            cfg[key], sources[key] = value, in_file[key]
    cfg.config_file = config_file

    for source, text in overrides:
        key, value = parse_override(text)
        check(nested(key, value), lambda _, where=source: where)
        set_dotted(cfg, key, value)
        sources[key.split(".")[0]] = source
    if schema is not None:
        schema.check(cfg, sources.get, strict=strict)
    return cfg, sources


def _checker(schema, strict, defaults, known):
    """How the YAML file's and each override's values are checked: against ``schema`` (every key, with
    its source), with ``check_config`` against the defaults' types (``strict`` without a schema), or not."""
    if schema is not None:
        return lambda values, source: schema.check(values, source, strict=strict)
    if not strict:
        return lambda values, source: None
    reference = reference_defaults(defaults, known)

    def check(values, source):
        for key, value in values.items():
            check_config({key: value}, reference, source=source(key))
    return check


def _flag_names(parser) -> dict:
    """Each dest's longest option string (``--config_file`` rather than ``-c``), for messages."""
    actions = getattr(parser, "_actions", ())  # argparse keeps them there and has no public accessor
    return {action.dest: max(action.option_strings, key=len) for action in actions if action.option_strings}


def _pop_overrides(values):
    """Takes the dests of add_override_arguments out of ``values``: ``[(source, "key=value"), ...]``."""
    overrides = []
    for dest, source in OVERRIDE_SOURCES.items():
        given = values.pop(dest, None) or []
        overrides += [(source, text) for text in ([given] if isinstance(given, str) else given)]
    return overrides


def _declared_defaults(parser, values):
    """Each dest's default as ``parser.get_default`` gives it, which needs no parse (so no required argument
    is in the way). argparse converts a string default with the argument's ``type``, which get_default
    does not show: there the parsed value stands in for the default."""
    defaults = {}
    for dest, value in values.items():
        default = parser.get_default(dest)
        defaults[dest] = value if isinstance(default, str) and not isinstance(value, str) else default
    return defaults


def _typed_dests(values, defaults, parser, argv):
    """The dests the user set: typed in ``argv``, or differing from the default (``args`` parsed from another list).

    With a parser, ``argv`` is parsed again into a namespace where every dest already holds
    a sentinel. argparse gives a dest its default only when the namespace lacks it (CPython
    3.9 to 3.13, ``parse_known_args``), so a dest still holding the sentinel was not typed.
    The few dests argparse sets when nothing is typed count as typed: positionals with nargs
    '?' or '*', and the options of a subcommand (argparse parses them into a fresh namespace
    and copies all of it back, defaults too). Without a parser, or where the second parse fails,
    a ``--name`` token in ``argv`` counts as typing ``name``.
    """
    typed = _reparse(parser, argv, values) if parser is not None else None
    if typed is None:
        typed = _scan_long_flags(values, argv)
    return typed | {dest for dest, value in values.items() if value != defaults[dest]}



def _reparse(parser, argv, dests):
    """The dests that parsing ``argv`` again sets, or None if that parse fails."""
    namespace = argparse.Namespace(**dict.fromkeys(dests, _UNTYPED))
    try:
        # Silenced: a failing parse prints usage (or --help, --version) and exits, and the
        # user's own parse has already said all there was to say.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            parser.parse_known_args(argv, namespace)
    except (Exception, SystemExit):  # argv may not be what args came from; append/extend/count meet the sentinel
        return None
    return {dest for dest in dests if getattr(namespace, dest) is not _UNTYPED}


def _scan_long_flags(values, argv):
    typed = set()
    for token in argv:
        if token == "--":
            break
        if not token.startswith("--"):
            continue
        name = token[2:].split("=", 1)[0].replace("-", "_")
        matches = [name] if name in values else [dest for dest in values if dest.startswith(name)]
        if len(matches) == 1:  # argparse accepts unambiguous prefixes
            typed.add(matches[0])
    return typed


def _save_to_private_folder(cfg):
    # A folder of its own, so that a copy into work_dir is named args_config.yaml and the
    # user's current folder stays clean.
    folder = tempfile.mkdtemp(prefix="basetrainer-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return save_config(cfg, os.path.join(folder, ARGS_FILE_NAME))
