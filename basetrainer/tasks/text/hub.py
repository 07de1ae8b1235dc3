"""Where a model or a dataset comes from: a local folder or file, or a name on the Hugging Face hub; and the
``hf`` extra's packages, imported with a one-line error when they are missing.

A hub name is looked up in the local cache first, with no network at all. Only when it is not there is the
hub asked once (a short request, not the libraries' minute of retries), and a hub that cannot be reached, or a
name it does not have, is one line naming the name and how to pass a local folder instead.
"""
import importlib
import os

from ...errors import ConfigError, DataError

EXTRA = 'pip install "basetrainer[hf]"'
_PACKAGES = ("transformers", "peft", "datasets", "tokenizers", "safetensors")
PROBE_TIMEOUT_S = 10


def require(package: str):
    """The module ``package`` of the ``hf`` extra; a ConfigError naming the pip command when it is missing."""
    try:
        return importlib.import_module(package)
    except ImportError:
        raise ConfigError(f"the text task needs {package} ({', '.join(_PACKAGES)}); {EXTRA}") from None


def require_transformers():
    return require("transformers")


def is_local(name: str) -> bool:
    """Whether ``name`` means a path on this machine: it exists, or it is written as one (``./``, ``/``, ``~``,
    more than one ``/``, a file suffix), which no hub name is."""
    name = os.path.expanduser(name)
    return (os.path.exists(name) or name.startswith((".", "/", os.sep)) or name.count("/") > 1
            or os.path.splitext(name)[1].lower() in (".json", ".jsonl", ".csv", ".parquet", ".txt"))


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def check_model_source(name: str, key: str = "model") -> None:
    """A ConfigError when ``name`` is a missing local folder, a folder no ``from_pretrained`` reads, or a hub name
    neither cached nor fetchable now."""
    if is_local(name):
        folder = os.path.expanduser(name)
        if not os.path.isdir(folder):
            raise ConfigError(f"{key} {name}: no such folder; give a folder written by save_pretrained, or a hub "
                              f"name such as Qwen/Qwen2.5-0.5B")
        if not any(os.path.isfile(os.path.join(folder, file)) for file in ("config.json", "adapter_config.json")):
            raise ConfigError(f"{key} {name}: the folder has no config.json; give a folder written by "
                              f"save_pretrained (config, weights, tokenizer)")
        return
    if _cached(name, "model"):
        return
    _probe_hub(name, "model", key)


def check_dataset_source(name: str, key: str) -> None:
    """As :func:`check_model_source`, for a dataset of the hub (a local file is checked where it is read)."""
    if _cached(name, "dataset"):
        return
    _probe_hub(name, "dataset", key)


def _cached(name: str, repo_type: str) -> bool:
    """Whether the hub cache holds a snapshot of ``name`` (no network)."""
    prefix = {"model": "models--", "dataset": "datasets--"}[repo_type]
    snapshots = os.path.join(_cache_dir(), prefix + name.replace("/", "--"), "snapshots")
    return os.path.isdir(snapshots) and bool(os.listdir(snapshots))


def _cache_dir() -> str:
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def _probe_hub(name: str, repo_type: str, key: str) -> None:
    """One short request to the hub for ``name``; a ConfigError when it fails."""
    how = (f"give {key} the local folder instead (on a machine that reaches the hub: "
           f"hf download {name}{' --repo-type dataset' if repo_type == 'dataset' else ''} --local-dir DIR, "
           f"then copy DIR here)")
    if offline():
        raise ConfigError(f"{key} {name}: not in the local Hugging Face cache and HF_HUB_OFFLINE is set, so it "
                          f"cannot be fetched; {how}")
    import huggingface_hub

    info = huggingface_hub.model_info if repo_type == "model" else huggingface_hub.dataset_info
    try:
        info(name, timeout=PROBE_TIMEOUT_S)
    except huggingface_hub.errors.RepositoryNotFoundError:
        raise ConfigError(f"{key} {name}: the Hugging Face hub has no {repo_type} of that name (or it is private "
                          f"and no token is set); check the name, or {how}") from None
    except Exception as error:  # noqa: BLE001 - any failure to reach the hub reads the same to a user
        reason = str(error).splitlines()[0][:120] if str(error) else type(error).__name__
        raise ConfigError(f"{key} {name}: cannot be fetched from the Hugging Face hub ({reason}) and is not in "
                          f"the local cache; {how}") from None


def data_error(name: str, error: BaseException) -> DataError:
    """A DataError for a file or dataset that exists and cannot be read: the library's first line."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return DataError(f"cannot read {name}: {first}")
