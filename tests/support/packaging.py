"""What the installed distribution declares."""
from importlib.metadata import requires


def requirements():
    return requires("basetrainer") or []


def names(extra=None):
    marker = f'extra == "{extra}"' if extra else None
    picked = [r for r in requirements() if (marker in r if marker else "extra ==" not in r)]
    return {r.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower() for r in picked}
