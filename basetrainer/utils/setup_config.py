"""Old import path of :mod:`basetrainer.config`, kept for existing scripts."""
from basetrainer.config import (  # noqa: F401
    Config,
    add_override_arguments,
    apply_overrides,
    check_config,
    load_config,
    parser_config,
    save_config,
)
