"""The text task's data sources: local JSONL, CSV and Parquet files and saved datasets read as the bundled data
are, a ClassLabel's names as the labels, where the evaluation data come from when test_data is null, and what is
left to learn."""
import json

import pytest

from basetrainer.config import Config
from basetrainer.errors import DataError
from basetrainer.tasks.text import data
from basetrainer.tasks.text.encoding import Encoder
from basetrainer.tasks.text.settings import FIELDS

RECORDS = [{"prompt": f"Greet {name}.", "completion": f" Hello, {name}!"} for name in ("Ann", "Bob", "Eve")]


def write(folder, kind):
    import datasets

    records = datasets.Dataset.from_list(RECORDS)
    path = folder / f"train.{kind}"
    if kind == "jsonl":
        path.write_text("".join(json.dumps(record) + "\n" for record in RECORDS))
    elif kind == "csv":
        records.to_csv(str(path), index=False)
    elif kind == "parquet":
        records.to_parquet(str(path))
    else:
        records.save_to_disk(str(path))
    return str(path)


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet", "saved"])
def test_local_files_and_saved_datasets_are_read_as_records(tmp_path, kind):
    records = data.read_records(write(tmp_path, kind), "train", "causal_lm")
    assert records.to_list() == RECORDS


def test_a_file_that_cannot_be_read_is_one_line_naming_it(tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "a", "completion"\n')
    with pytest.raises(DataError, match=r"^cannot read train_data .*broken.jsonl: "):
        data.read_records(str(broken), "train", "causal_lm")
    with pytest.raises(DataError, match=r"no such file"):
        data.check_source(str(tmp_path / "nothing.csv"), "train_data")
    (tmp_path / "notes.txt").write_text("some text")
    with pytest.raises(DataError, match=r"read are .jsonl, .json, .csv and .parquet files"):
        data.check_source(str(tmp_path / "notes.txt"), "train_data")


def test_a_class_labels_names_are_the_labels_in_id_order():
    import datasets

    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["negative", "positive"])})
    records = datasets.Dataset.from_dict({"text": ["bad", "good", "fine"], "label": [0, 1, 1]}, features=features)
    assert data.label_names(records, "label", "train_data") == ["negative", "positive"]


@pytest.mark.parametrize("train, expected", [("bundled", "bundled"), ("tatsu-lab/alpaca", "tatsu-lab/alpaca"),
                                             ("tatsu-lab/alpaca:train[:90%]", ""), ("train.jsonl", "")])
def test_a_null_test_data_is_the_test_split_of_the_same_source_where_it_has_one(train, expected):
    assert data.test_source(Config(train_data=train, test_data=None)) == expected
    assert data.test_source(Config(train_data=train, test_data="")) == ""


def test_samples_left_with_nothing_to_learn_are_dropped_and_none_left_is_one_line(tiny_text_models):
    import datasets
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_text_models["gpt2"])
    records = datasets.Dataset.from_list(RECORDS)
    short = Encoder(tokenizer, "prompt_completion", FIELDS.defaults(), max_seq_len=3)  # the prompt fills it
    with pytest.raises(DataError, match=r"^train_data: no sample left to learn from .*max_seq_len 3"):
        data.encode(records, short, packing=False)
    learnt = data.encode(records, Encoder(tokenizer, "prompt_completion", FIELDS.defaults(), max_seq_len=64),
                         packing=False)
    assert len(learnt) == 3
