"""Where a model or a dataset comes from: a hub name that cannot be fetched (offline, or no hub reachable, or no
such repository) and a missing folder or file are one line each, naming the name and how to pass a local folder."""
import pytest

from basetrainer.errors import ConfigError, DataError
from basetrainer.tasks.text import hub
from basetrainer.tasks.text.data import check_source
from basetrainer.tasks.text.hub import check_model_source, is_local

NO_SUCH_MODEL = "basetrainer-tests/no-such-model-5e1f"


def test_a_hub_name_offline_is_one_line_naming_it_and_the_local_folder_way(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "_cache_dir", lambda: str(tmp_path))  # an empty cache
    with pytest.raises(ConfigError) as refused:
        check_model_source("Qwen/Qwen2.5-0.5B")
    assert str(refused.value) == (
        "model Qwen/Qwen2.5-0.5B: not in the local Hugging Face cache and HF_HUB_OFFLINE is set, so it cannot be "
        "fetched; give model the local folder instead (on a machine that reaches the hub: hf download "
        "Qwen/Qwen2.5-0.5B --local-dir DIR, then copy DIR here)")


def test_a_hub_name_the_hub_cannot_give_is_one_line_naming_it_and_the_local_folder_way(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "_cache_dir", lambda: str(tmp_path))
    with pytest.raises(ConfigError) as refused:  # no hub reachable here; where one is, it has no such model
        check_model_source(NO_SUCH_MODEL)
    message = str(refused.value)
    assert message.startswith(f"model {NO_SUCH_MODEL}: ") and "\n" not in message
    assert message.endswith(f"give model the local folder instead (on a machine that reaches the hub: hf download "
                            f"{NO_SUCH_MODEL} --local-dir DIR, then copy DIR here)")


def test_a_hub_dataset_offline_is_one_line_too(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "_cache_dir", lambda: str(tmp_path))
    with pytest.raises(ConfigError, match=r"^train_data tatsu-lab/alpaca: not in the local Hugging Face cache .*hf "
                                          r"download tatsu-lab/alpaca --repo-type dataset --local-dir DIR"):
        check_source("tatsu-lab/alpaca:train[:90%]", "train_data")


def test_a_missing_folder_or_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^model \./nowhere: no such folder; give a folder written by "
                                          r"save_pretrained, or a hub name"):
        check_model_source("./nowhere")
    with pytest.raises(ConfigError, match="the folder has no config.json"):
        check_model_source(str(tmp_path))
    with pytest.raises(DataError, match=r"^test_data .*missing.jsonl: no such file"):
        check_source(str(tmp_path / "missing.jsonl"), "test_data")


@pytest.mark.parametrize("name, local", [("Qwen/Qwen2.5-0.5B", False), ("gpt2", False), ("./gpt2", True),
                                         ("data/text/tiny-llama", True), ("train.jsonl", True)])
def test_paths_and_hub_names_are_told_apart(name, local):
    assert is_local(name) == local


def test_a_missing_package_of_the_extra_is_one_line_naming_the_pip_command(monkeypatch):
    import sys

    from basetrainer.tasks.text.hub import require

    monkeypatch.setitem(sys.modules, "peft", None)  # import peft raises ImportError
    with pytest.raises(ConfigError, match=r'^the text task needs peft \(transformers, peft, datasets, tokenizers, '
                                          r'safetensors\); pip install "basetrainer\[hf\]"$'):
        require("peft")
