"""The task's datasets: read (the bundled one, a local JSONL, JSON, CSV or Parquet file, a folder written by
``Dataset.save_to_disk``, or a dataset of the Hugging Face hub), checked, and encoded into token samples.

``train_data`` and ``test_data`` name a source each: ``bundled`` (:mod:`~basetrainer.tasks.text.bundled`, the kind the task type
needs), a path, or a hub name with an optional split after a colon (``tatsu-lab/alpaca:train[:95%]``; the
split defaults to ``train`` and ``test``), with ``data_config`` the hub dataset's configuration.
"""
import os

from ...errors import DataError
from . import bundled
from .encoding import Encoder, detect_format, pack
from .hub import check_dataset_source, data_error, is_local, require

BUNDLED = "bundled"
_FILE_KINDS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def bundled_kind(task_type: str) -> str:
    return "reviews" if task_type == "sequence_classification" else "instructions"


def test_source(cfg) -> str:
    """Where the evaluation data come from: ``test_data``, or when it is null the test split of ``train_data``'s
    source if that is ``bundled`` or a hub name without a split, else nowhere (``""``)."""
    if cfg.test_data is not None:
        return cfg.test_data
    train = cfg.train_data
    return train if train == BUNDLED or not (is_local(train) or ":" in train) else ""


def check_source(source: str, key: str) -> None:
    """Before any work: a missing local file, a file of another kind, or a hub dataset that cannot be had, in one
    line (a ConfigError, or a DataError for a local file)."""
    if source == BUNDLED:
        return
    if is_local(source):
        path = os.path.expanduser(source)
        if not os.path.exists(path):
            raise DataError(f"{key} {source}: no such file; give a .jsonl, .json, .csv or .parquet file, a folder "
                            f"written by save_to_disk, a hub dataset name, or bundled")
        if os.path.isfile(path) and os.path.splitext(path)[1].lower() not in _FILE_KINDS:
            raise DataError(f"{key} {source}: read are .jsonl, .json, .csv and .parquet files; convert it, or give "
                            f"a folder written by save_to_disk")
        return
    check_dataset_source(source.partition(":")[0], key)


def read_records(source: str, split: str, task_type: str, data_config=None, key: str = "train_data"):
    """A ``datasets.Dataset`` of ``source``'s records (``split``: the hub split unless the name gives one)."""
    datasets = require("datasets")
    datasets.disable_progress_bars()
    if source == BUNDLED:
        return datasets.Dataset.from_list(bundled.examples(bundled_kind(task_type), split))
    path = os.path.expanduser(source)
    try:
        if is_local(source) and os.path.isdir(path):
            records = datasets.load_from_disk(path)
            if isinstance(records, datasets.DatasetDict):
                if split not in records:
                    raise DataError(f"{key} {source}: no split {split!r} (it has {', '.join(records)})")
                records = records[split]
            return records
        if is_local(source):
            kind = _FILE_KINDS[os.path.splitext(path)[1].lower()]
            return datasets.load_dataset(kind, data_files=path, split="train", keep_in_memory=True)
        name, _, named_split = source.partition(":")
        return datasets.load_dataset(name, data_config, split=named_split or split)
    except DataError:
        raise
    except Exception as error:  # noqa: BLE001 - the readers' own errors, one line each
        raise data_error(f"{key} {source}", error) from None


def label_names(records, field: str, key: str) -> list:
    """The training labels in id order: a ClassLabel's names, else the distinct values sorted."""
    feature = records.features.get(field)
    names = getattr(feature, "names", None)
    if names:
        return list(names)
    values = sorted(set(records[field]), key=str)
    if len(values) < 2:
        raise DataError(f"{key}: the {field!r} column has {len(values)} distinct label(s); a classifier needs two "
                        f"or more")
    return values


def encode(records, encoder: Encoder, *, packing: bool, max_samples=None, key: str = "train_data"):
    """The records encoded (``encoder``), those left with nothing to learn dropped, packed into blocks of
    ``encoder.max_seq_len`` when asked; a DataError when nothing is left."""
    if max_samples is not None:
        records = records.select(range(min(max_samples, len(records))))
    columns = list(records.column_names)
    if encoder.label_ids is not None and hasattr(records.features.get(encoder.fields["label"]), "names"):
        names = records.features[encoder.fields["label"]].names
        records = records.map(lambda r: {encoder.fields["label"]: names[r[encoder.fields["label"]]]},
                              keep_in_memory=True, new_fingerprint=f"{records._fingerprint}-names")
        records = records.cast_column(encoder.fields["label"], require("datasets").Value("string"))
    try:
        samples = records.map(encoder, remove_columns=columns, keep_in_memory=True,
                              new_fingerprint=f"{records._fingerprint}-encoded-{encoder.max_seq_len}")
    except DataError as error:
        raise DataError(f"{key}: {error}") from None
    if encoder.label_ids is None:
        samples = samples.filter(lambda sample: any(label != -100 for label in sample["labels"][1:]),
                                 keep_in_memory=True, new_fingerprint=f"{samples._fingerprint}-learnt")
        if packing:
            samples = samples.map(lambda batch: pack(batch, encoder.max_seq_len), batched=True, batch_size=1000,
                                  keep_in_memory=True, new_fingerprint=f"{samples._fingerprint}-packed")
    if len(samples) == 0:
        raise DataError(f"{key}: no sample left to learn from (each needs a token to predict within max_seq_len "
                        f"{encoder.max_seq_len}{', and packing needs max_seq_len tokens in all' if packing else ''})")
    return samples


def build_encoder(records, tokenizer, cfg, key: str, labels=None) -> Encoder:
    """The encoder for ``records`` (their format detected from the columns unless ``format`` names it)."""
    fmt = detect_format(list(records.column_names), cfg.fields, cfg.task_type, cfg.format, key)
    if fmt == "chat" and not tokenizer.chat_template:
        raise DataError(f"{key}: chat data and the tokenizer of {cfg.model} has no chat template; set chat_template "
                        f"(a Jinja template, or the path of a .jinja file)")
    return Encoder(tokenizer, fmt, cfg.fields, cfg.max_seq_len, cfg.completion_only_loss, labels=labels)
