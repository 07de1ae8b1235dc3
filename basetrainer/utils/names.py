"""Names a user types for a registry entry: ``multi-step``, ``Multi_Step`` and ``multistep`` are one name."""
from ..errors import ConfigError


def lookup_name(table: dict, given, key: str, known: str):
    """``table``'s entry for ``given`` (case, ``-``, ``_`` and spaces ignored; ``table``'s keys are written that
    way); a one-line ConfigError naming ``key`` and the ``known`` names otherwise."""
    entry = table.get(str(given).lower().replace("-", "").replace("_", "").replace(" ", ""))
    if entry is None:
        raise ConfigError(f"unknown {key} {given!r}; use one of: {known}")
    return entry
