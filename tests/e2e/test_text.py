"""The text task end to end on the tiny models (tests/conftest.py's ``tiny_text_models``, save_pretrained folders
built here, nothing fetched): LoRA fine-tuning of a Llama-like model whose adapters alone train and are checkpointed,
saved back as a folder transformers and peft load and ``basetrainer export`` merges; the same steps in two
processes under DDP and under FSDP2 over the decoder layers the model names; an exact resume after a kill; the
Qwen2-like model on chat data, packed, under bf16 autocast with accumulation, clipping and activation
checkpointing; the GPT-2-like model as a sequence classifier; and the tuning tools on the task."""
import json
import math
import re

import pytest
import torch

from basetrainer.checkpoint import load_checkpoint
from support.compare import load_result, same_weights
from support.processes import run_python
from support import EXAMPLES, WORKERS

WORKER = WORKERS / "text_worker.py"
PROMPT = "What is 5 plus 5?"


def config(models, work_dir, *more, architecture="llama"):
    """24 bundled prompts in batches of 4 (6 steps), LoRA rank 4 without dropout (so that 1 and 2 processes draw
    nothing different), the global batch's lr scaling and a target, checkpoints every step."""
    return ["--model", models[architecture], "--work_dir", work_dir, "max_samples=24", "batch_size=4", "num_epochs=1",
            "lora.r=4", "lora.dropout=0", "lr=0.01", "progress=false", "loggers=[csv,tensorboard]", "num_workers=0",
            "checkpoint_every_n_iters=1", "generate.count=2", "generate.max_new_tokens=4", "log_freq=3",
            "lr_scaling={rule: linear, base_batch_size: 4}", "target={metric: loss, value: 100, mode: min}", *more]


def train(models, work_dir, *more, processes=1, architecture="llama"):
    arguments = config(models, work_dir, *more, architecture=architecture)
    if processes > 1:
        arguments = [*arguments, "--distributed", "--gpu_id", *map(str, range(processes)),
                     f"batch_size={4 // processes}"]
    result = run_python(["-m", "basetrainer", "train", "--task", "text", *arguments], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return work_dir


def log_of(work_dir) -> str:
    return (work_dir / "log" / "train.log").read_text(encoding="utf-8")


def adapter(work_dir) -> dict:
    from safetensors.torch import load_file

    return load_file(str(work_dir / "model" / "model_final" / "adapter_model.safetensors"))


@pytest.fixture(scope="module")
def uninterrupted(tiny_text_models, tmp_path_factory):
    folder = tmp_path_factory.mktemp("uninterrupted")
    run_python([WORKER, "--out", folder / "w.pt", *config(tiny_text_models, folder / "work")], check=True,
               timeout=300)
    return folder


@pytest.fixture(scope="module")
def ddp(tiny_text_models, tmp_path_factory):
    return train(tiny_text_models, tmp_path_factory.mktemp("ddp") / "work", processes=2)


@pytest.fixture(scope="module")
def fsdp(tiny_text_models, tmp_path_factory):
    return train(tiny_text_models, tmp_path_factory.mktemp("fsdp") / "work", "strategy=fsdp", processes=2)


def test_only_the_adapters_train_and_the_log_says_how_many_parameters_of_how_many(uninterrupted):
    log = log_of(uninterrupted / "work")
    trainable, total = (int(n.replace(",", "")) for n in re.search(
        r"LoRA r 4 alpha 16 on q_proj, v_proj: ([\d,]+) of ([\d,]+) parameters train", log).groups())
    result = load_result(uninterrupted / "w.pt")
    assert result["optimized"] and all(".lora_" in name for name in result["optimized"])
    assert trainable == sum(value.numel() for value in result["weights"].values()) and total > 50 * trainable


def test_checkpoints_hold_the_adapters_and_their_optimizer_state_only(uninterrupted):
    saved = load_checkpoint(str(uninterrupted / "work" / "model" / "last.pth"))
    assert set(saved["model"]) == set(load_result(uninterrupted / "w.pt")["optimized"])
    assert len(saved["optimizer"]["state"]) == len(saved["model"])


def test_the_test_loss_perplexity_and_tokens_per_second_are_published(uninterrupted):
    logs = load_result(uninterrupted / "w.pt")["logs"]
    assert math.isclose(logs["test"]["perplexity"], math.exp(logs["test"]["loss"]), rel_tol=1e-9)
    assert math.isclose(logs["train"]["perplexity"], math.exp(logs["train"]["loss"]), rel_tol=1e-9)
    assert re.search(r"step 6: tokens/s \(all processes\) \d+; test loss [\d.]+, perplexity [\d.]+",
                     log_of(uninterrupted / "work"))
    history = [json.loads(line) for line in (uninterrupted / "work" / "log" / "history.jsonl").open()]
    assert history[-1]["train"]["tokens_per_s"] > 0 and "perplexity" in history[-1]["test"]


def test_each_evaluation_logs_completions_of_fixed_prompts(uninterrupted):
    assert "completions at step 6:\n  'What is " in log_of(uninterrupted / "work")
    records = [json.loads(line) for line in (uninterrupted / "work" / "log" / "completions.jsonl").open()]
    assert [(record["step"], record["epoch"]) for record in records] == [(6, 1), (6, 1)]
    assert all(record["prompt"].endswith((".", "?")) and isinstance(record["completion"], str) for record in records)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(uninterrupted / "work" / "log"))
    events.Reload()
    [text] = events.Tensors("completions/text_summary")  # the trackers' copy, at the last batch's step
    assert text.step == 5 and f"{records[0]['prompt']!r} -> " in text.tensor_proto.string_val[0].decode()


def test_model_final_is_an_adapter_folder_that_transformers_and_peft_load_and_generate_with(uninterrupted,
                                                                                          tiny_text_models):
    import peft
    import transformers

    folder = uninterrupted / "work" / "model" / "model_final"
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == str(
        tiny_text_models["llama"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)  # the base, with the adapter through peft
    output = model.generate(**tokenizer([PROMPT], return_tensors="pt"), max_new_tokens=3, do_sample=False)
    assert output.shape[1] > len(tokenizer(PROMPT)["input_ids"])
    base = transformers.AutoModelForCausalLM.from_pretrained(tiny_text_models["llama"])
    adapted = peft.PeftModel.from_pretrained(base, folder)
    trained = load_result(uninterrupted / "w.pt")["weights"]
    loaded = {name: value for name, value in adapted.state_dict().items() if ".lora_" in name}
    assert same_weights(loaded, trained)


def test_export_writes_the_merged_model_that_gives_the_adapter_models_logits(uninterrupted, tmp_path):
    import transformers

    result = run_python(["-m", "basetrainer", "export", uninterrupted / "work" / "model" / "model_final",
                         "--out", tmp_path / "merged"])
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"check: the written model's logits equal .*: max abs diff [\d.e+-]+", result.stdout)
    merged = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert not any("lora" in name for name in merged.state_dict())
    assert (tmp_path / "merged" / "model.safetensors").is_file() and (tmp_path / "merged" / "tokenizer.json").is_file()
    refused = run_python(["-m", "basetrainer", "export", uninterrupted / "work" / "model" / "last.pth", "--out",
                          tmp_path / "model.onnx"])  # the checkpoint holds the adapters alone
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].endswith(
        f"is a text run's checkpoint: export the save_pretrained folder the run wrote, basetrainer export "
        f"{uninterrupted / 'work' / 'model' / 'model_final'} --out DIR (the adapter merged)")


def test_two_processes_under_ddp_train_the_adapters_one_process_trains(uninterrupted, ddp):
    one, two = adapter(uninterrupted / "work"), adapter(ddp)
    assert one.keys() == two.keys()
    assert all(torch.allclose(one[key], two[key], atol=2e-5) for key in one)
    assert json.loads((ddp / "log" / "target.json").read_text())["metric"] == "loss"


def test_fsdp_shards_the_decoder_layers_the_model_names_and_trains_what_one_process_trains(uninterrupted, fsdp):
    assert "fsdp: 2 unit(s) of LlamaDecoderLayer (named by the model (_no_split_modules)) and the root, sharded " \
           "over 2 processes" in log_of(fsdp)
    one, two = adapter(uninterrupted / "work"), adapter(fsdp)
    assert all(torch.allclose(one[key], two[key], atol=2e-5) for key in one)
    from basetrainer.checkpoint.safe_dcp import read_metadata

    saved = [key for key in read_metadata(str(fsdp / "model" / "last")).state_dict_metadata if key.startswith("model.")]
    assert saved and all(".lora_" in key for key in saved)  # the sharded checkpoint holds the adapters alone


def test_resume_after_a_kill_mid_epoch_ends_bitwise_like_an_uninterrupted_run(tiny_text_models, uninterrupted,
                                                                               tmp_path):
    arguments = config(tiny_text_models, tmp_path / "work")
    killed = run_python([WORKER, "--out", tmp_path / "w.pt", "--kill-at", "0:2", *arguments], timeout=300)
    assert killed.returncode != 0 and not (tmp_path / "w.pt").exists()
    assert load_checkpoint(str(tmp_path / "work" / "model" / "last.pth"))["iteration"] == 2  # the kill comes before batch 2's checkpoint
    run_python([WORKER, "--out", tmp_path / "w.pt", *arguments, "--resume", "auto"], check=True, timeout=300)
    resumed, expected = load_result(tmp_path / "w.pt"), load_result(uninterrupted / "w.pt")
    assert same_weights(resumed["weights"], expected["weights"])
    assert resumed["logs"] == expected["logs"]


def quick(models, work_dir, architecture, *more):
    """A short run of ``architecture`` on 16 bundled records, without the lr scaling and the target."""
    return ["--task", "text", "--model", models[architecture], "--work_dir", work_dir, "max_samples=16",
            "batch_size=4", "progress=false", "loggers=[csv]", "num_workers=0", *more]


def test_a_qwen2_model_trains_on_packed_chat_data_under_bf16_with_accumulation_clipping_and_checkpointing(
        tiny_text_models, tmp_path):
    import transformers

    result = run_python(["-m", "basetrainer", "train", *quick(
        tiny_text_models, tmp_path / "work", "qwen2", "num_epochs=1", "format=chat", "packing=true", "max_seq_len=32",
        "amp=bf16", "accumulate_grad_batches=2", "clip_grad_norm=1.0", "activation_checkpointing=[auto]", "lr=0.001",
        "generate.count=1", "generate.max_new_tokens=2")], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    log = log_of(tmp_path / "work")
    assert "activation checkpointing: 2 module(s) of Qwen2DecoderLayer recompute" in log
    assert "format chat, packed" in log and "full fine-tuning: 107,072 of 107,072 parameters train" in log
    history = [json.loads(line) for line in (tmp_path / "work" / "log" / "history.jsonl").open()]
    assert math.isfinite(history[-1]["train"]["loss"]) and math.isfinite(history[-1]["test"]["loss"])
    folder = tmp_path / "work" / "model" / "model_final"
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)  # the whole model, no adapter
    assert (folder / "model.safetensors").is_file() and type(model).__name__ == "Qwen2ForCausalLM"


def test_a_gpt2_model_trains_as_a_sequence_classifier_with_lora_and_its_new_head(tiny_text_models, tmp_path):
    import peft

    result = run_python(["-m", "basetrainer", "train", *quick(
        tiny_text_models, tmp_path / "work", "gpt2", "--task_type", "sequence_classification", "num_epochs=1",
        "lora.r=4", "lr=0.01", "monitor=Acc")], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    history = [json.loads(line) for line in (tmp_path / "work" / "log" / "history.jsonl").open()]
    assert set(history[-1]["test"]) == {"loss", "Acc"} and 0 <= history[-1]["test"]["Acc"] <= 100
    saved = load_checkpoint(str(tmp_path / "work" / "model" / "last.pth"))
    assert "base_model.model.score.modules_to_save.default.weight" in saved["model"]  # the new head trains
    assert "LoRA r 4 alpha 16 on c_attn" in log_of(tmp_path / "work")
    model = peft.AutoPeftModelForSequenceClassification.from_pretrained(tmp_path / "work" / "model" / "model_final")
    assert model.base_model.model.score.out_features == 2


def test_lr_find_and_batch_find_probe_the_text_task(tiny_text_models, tmp_path):
    lr_find = run_python(["-m", "basetrainer", "lr-find", *quick(tiny_text_models, tmp_path / "work", "llama"),
                          "lora.r=4", "--num_steps", "6"], timeout=300)
    assert lr_find.returncode == 0, lr_find.stderr[-3000:]
    assert "lr range test: 6 of 6 steps from lr 1e-07 to 10;" in lr_find.stdout  # a suggestion, or why there is none
    assert (tmp_path / "work" / "lr_find" / "lr_find.csv").is_file()
    batch_find = run_python(["-m", "basetrainer", "batch-find", *quick(tiny_text_models, tmp_path / "work", "llama"),
                             "--max_memory", "256", "--first_size", "2", "--max_trials", "2", "--steps", "1"],
                            timeout=300)
    assert batch_find.returncode == 0, batch_find.stderr[-3000:]
    # the knee, where throughput stops growing (the clock's to say), with the lr for it where it is not the config's 4
    found = re.fullmatch(r"batch_size=(\d+)( 'lr_scaling=\{rule: sqrt, base_batch_size: 4\}')?",
                         batch_find.stdout.strip().splitlines()[-1])
    assert found and (found[1] == "4") == (found[2] is None), batch_find.stdout[-1000:]


def test_a_study_runs_the_text_task_once_per_batch_size(tiny_text_models, tmp_path):
    result = run_python(["-m", "basetrainer", "study", "--batch-sizes", "4", "--rule", "sqrt", "--base-batch-size",
                         "8", "--target-metric", "perplexity", "--target-mode", "min", "--target-value", "1e6",
                         "--out", tmp_path / "study", "--", "--task", "text", "--model", tiny_text_models["llama"],
                         "max_samples=8", "num_epochs=1", "lora.r=4", "progress=false", "loggers=[csv]",
                         "generate.count=0"], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = (tmp_path / "study" / "study.csv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].startswith("4,")
    assert json.loads((tmp_path / "study" / "run_bs4" / "log" / "target.json").read_text())["metric"] == "perplexity"


def test_a_hub_name_that_cannot_be_fetched_is_one_line_naming_it_and_the_local_folder_way(tmp_path):
    result = run_python(["-m", "basetrainer", "train", "--task", "text", "--model", "Qwen/Qwen2.5-0.5B",
                         "--work_dir", tmp_path / "work"], env={"HF_HUB_OFFLINE": "1"}, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: model Qwen/Qwen2.5-0.5B: not in the local Hugging Face cache and HF_HUB_OFFLINE is set, so it cannot "
        "be fetched; give model the local folder instead (on a machine that reaches the hub: hf download "
        "Qwen/Qwen2.5-0.5B --local-dir DIR, then copy DIR here)")
    assert not (tmp_path / "work").exists()


def test_the_example_writes_its_tiny_model_offline_fine_tunes_it_and_saves_it_back(tmp_path):
    result = run_python([EXAMPLES / "finetune_text.py", "--num_epochs", "1", "max_samples=16", "progress=false",
                         "loggers=[csv]", "generate.count=1"], cwd=tmp_path, env={"HF_HUB_OFFLINE": "1"},
                        timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    model = tmp_path / "data" / "text" / "tiny-llama"
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= {
        path.name for path in model.iterdir()}
    final = tmp_path / "work_dirs" / "text_example" / "model" / "model_final"
    assert (final / "adapter_model.safetensors").is_file() and (final / "tokenizer.json").is_file()
    assert "and embed_tokens, lm_head whole" in log_of(tmp_path / "work_dirs" / "text_example")
