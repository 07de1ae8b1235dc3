"""Every config key of the text task, declared once: the loop's keys (with the task's defaults), those it shares
with the classification task (optimisation, runtime, checkpoints) and its own (data, model, LoRA, generation).
Its command line (:mod:`~basetrainer.tasks.text.config`), its part of ``docs/reference/configuration.md`` and ``configs/text.yaml``
(:mod:`basetrainer.tasks.reference`) are made from these."""
from ...config.kinds import Boolean, Choice, Fields, Integer, ListOf, Number, Text
from ...config.schema import Schema, Setting
from ..common.settings import COMMON_SETTINGS, task_loop_settings
from ..common.settings import GROUPS as COMMON_GROUPS
from .encoding import FORMATS
from .pretrained import DTYPES

DEFAULT_MODEL = "data/text/tiny-llama"  # written on first use: a tiny Llama-like model and its tokenizer
DEFAULT_NUM_EPOCHS = 3
TASK_TYPES = ("causal_lm", "sequence_classification")

GROUPS = {group: title for group, title in COMMON_GROUPS.items() if group != "pruning"}
GROUPS = {**GROUPS, "model": "model and LoRA", "callbacks": "evaluation and other callbacks"}
CONFIG_YAML_GROUPS = {group: title for group, title in GROUPS.items() if group not in ("command line", "run")}

# The classification task's keys that mean the same here: how to optimise, run and checkpoint.
SHARED = ("config_file", "batch_size", "num_workers", "optim_type", "lr", "momentum", "weight_decay", "scheduler",
          "milestones", "num_warn_up", "distributed", "num_machines", "machine_rank", "dist_url", "dist_timeout",
          "log_freq", "loggers", "mlflow_tracking_uri", "wandb_mode", "save_best_k", "monitor", "monitor_mode",
          "checkpoint_every_n_iters", "checkpoint_every_n_minutes", "early_stopping_patience")

_SOURCE = Text(non_empty=True, meaning="bundled, a path or a hub dataset name")
_FIELD = Text(non_empty=True, meaning="a column name")
FIELDS = Fields(text=(_FIELD, "text"), prompt=(_FIELD, "prompt"), completion=(_FIELD, "completion"),
                messages=(_FIELD, "messages"), label=(_FIELD, "label"))
_MODULES = ListOf(Text(non_empty=True, meaning="a module name"), min_length=1, single=True)
LORA = Fields(r=(Integer(minimum=0), 0), alpha=(Number(0, above=True), 16.0), dropout=(Number(0, 1, below=True), 0.05),
              target_modules=(_MODULES, None), modules_to_save=(_MODULES, None))
GENERATE = Fields(prompts=(ListOf(Text(), single=True), None), count=(Integer(minimum=0), 3),
                  max_new_tokens=(Integer(minimum=1, maximum=4096), 24))

TEXT_ONLY = Schema([
    # ---------------------------------------------------------------- data
    Setting("task_type", Choice(*TASK_TYPES), "causal_lm",
            "causal_lm (next-token fine-tuning) or sequence_classification (a label per text)", group="data", flag={}),
    Setting("train_data", _SOURCE, "bundled",
            "training data: bundled (generated instructions, or reviews for classification), a .jsonl, .json, .csv "
            "or .parquet file, a folder written by save_to_disk, or a hub dataset name[:split] (split: train)",
            group="data", flag={}),
    Setting("test_data", Text(), None,
            "evaluation data, as train_data (a hub name's split: test); null: the test split of train_data's source "
            "when it is bundled or a hub name without a split, else none; \"\": no evaluation", nullable=True,
            group="data", flag={}),
    Setting("data_config", Text(non_empty=True, meaning="a configuration name"), None,
            "a hub dataset's configuration (load_dataset's name), e.g. wikitext-2-raw-v1", nullable=True,
            group="data"),
    Setting("format", Choice("auto", *FORMATS), "auto",
            "what a record holds: text (all learnt), prompt_completion, chat (messages through the chat template); "
            "auto: the first whose fields the data has (chat, prompt_completion, text)", group="data"),
    Setting("fields", FIELDS, FIELDS.defaults(), "the column names of the text, prompt, completion, messages and "
            "label fields", group="data"),
    Setting("chat_template", Text(non_empty=True, meaning="a Jinja template or a path"), None,
            "chat data: a Jinja chat template, or a .jinja file, replacing the tokenizer's (saved with it)",
            nullable=True, group="data"),
    Setting("max_seq_len", Integer(minimum=2, maximum=1_048_576), 256,
            "tokens per sample at most (longer ones are cut at the end); with packing, tokens per block",
            unit="tokens", group="data", flag={}),
    Setting("packing", Boolean(), False,
            "concatenate the samples and cut them into blocks of max_seq_len tokens (no padding; attention "
            "crosses samples within a block)", group="data", flag={}),
    Setting("completion_only_loss", Boolean(), True,
            "prompt_completion data: learn the completion only (the prompt's tokens take no loss); chat data: "
            "learn the assistant's replies only",
            group="data"),
    Setting("max_samples", Integer(minimum=1), None, "read at most this many records of each dataset (null: all)",
            nullable=True, group="data"),
    # ---------------------------------------------------------------- model
    Setting("model", Text(non_empty=True, meaning="a folder or a hub model name"), DEFAULT_MODEL,
            "the pretrained model and tokenizer: a folder written by save_pretrained, or a hub name such as "
            f"Qwen/Qwen2.5-0.5B (the default, {DEFAULT_MODEL}, a tiny Llama-like model, is written on first use)",
            group="model", flag={}),
    Setting("revision", Text(non_empty=True, meaning="a branch, tag or commit"), None,
            "the hub model's revision (null: main)", nullable=True, group="model"),
    Setting("trust_remote_code", Boolean(), False, "run the model's own code from the hub (as from_pretrained does)",
            group="model"),
    Setting("model_dtype", Choice(*DTYPES), "float32",
            "the dtype the weights are loaded and trained in (auto: the checkpoint's); amp: bf16 computes in bf16 "
            "over float32 weights", group="model"),
    Setting("attn_implementation", Choice("eager", "sdpa", "flash_attention_2", "flex_attention"), None,
            "the attention kernel (null: the library's default, sdpa)", nullable=True, group="model"),
    Setting("lora", LORA, LORA.defaults(),
            "LoRA through peft: adapters of rank r (0: off, the whole model trains), scaled alpha / r, dropout on "
            "their input, on target_modules (null: peft's default for the architecture, e.g. q_proj and v_proj; "
            "[all-linear]: every linear layer but the output); modules_to_save: modules trained whole beside the "
            "adapters, e.g. [embed_tokens, lm_head] (a classifier's new head always is)", group="model"),
    Setting("num_labels", Integer(minimum=2), None,
            "sequence classification: the number of labels (null: read from the training data; set, it must match)",
            nullable=True, group="model"),
    Setting("labels", ListOf(Text()), None, "the label names, read from the training data", nullable=True,
            group="run"),
    # ---------------------------------------------------------------- evaluation
    Setting("generate", GENERATE, GENERATE.defaults(),
            "causal_lm: each evaluation, greedy completions of prompts (null: the first count prompts of test_data) "
            "of up to max_new_tokens tokens, in the log and the trackers (count 0: none)", group="callbacks"),
])

# The loop's keys as the task sets them, the keys it shares with the classification task, and its own.
TASK_SETTINGS = (
    task_loop_settings(DEFAULT_NUM_EPOCHS, "work_dirs/text",
                       "text log, history, TensorBoard events, generated completions")
    + Schema([COMMON_SETTINGS[name] for name in SHARED])
    .replace("batch_size", default=8, unit="sequences", help="sequences per batch and per process")
    .replace("optim_type", default="AdamW")
    .replace("lr", default=2e-4)
    .replace("weight_decay", default=0.0, help="weight decay (AdamW: decoupled), not on biases and norms")
    .replace("save_best_k", default=0, help="keep the k best models by the monitored value "
                                            "(model/best_model_<epoch>_<value>.pth: the whole model's weights as one "
                                            "state_dict, the frozen base's too; model_final/ is the run's "
                                            "save_pretrained folder)")
    .replace("monitor", default="loss", help="the test value that picks the best models and that early stopping "
                                             "watches: loss, perplexity, or Acc (sequence classification)")
    .replace("early_stopping_patience", help="stop after this many evaluations without a better monitored value "
                                             "(0: off)")
    + TEXT_ONLY
)
