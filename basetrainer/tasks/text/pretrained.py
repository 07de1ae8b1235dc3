"""The model and its tokenizer, as ``from_pretrained`` loads them from a hub name or a local folder, made ready
for the task: the padding token and side the model needs, the head of the task type, and LoRA through ``peft``.

The model stays the library's own class (``LlamaForCausalLM``, a ``PeftModel`` around it); the engine's
strategies wrap it like any module, and FSDP shards it by the blocks the model names itself
(``_no_split_modules``: its decoder layers).
"""
import contextlib
import os
import warnings

from ...errors import ConfigError
from ...utils.log import get_logger
from .hub import require

logger = get_logger()
DTYPES = ("float32", "bfloat16", "float16", "auto")
_PEFT_TASK = {"causal_lm": "CAUSAL_LM", "sequence_classification": "SEQ_CLS"}


def _quiet(transformers) -> None:
    """No progress bars from transformers (loading weights): the run's log is ours."""
    transformers.utils.logging.disable_progress_bar()


def load_tokenizer(cfg):
    """``cfg.model``'s tokenizer: ``chat_template`` set when the config gives one, a padding token when it has none
    (its end token, as the HF examples do: a pad is never learnt, the attention mask hides it), padding on the
    right for training."""
    transformers = require("transformers")
    _quiet(transformers)
    tokenizer = transformers.AutoTokenizer.from_pretrained(os.path.expanduser(cfg.model), revision=cfg.revision,
                                                           trust_remote_code=cfg.trust_remote_code)
    if cfg.chat_template:
        tokenizer.chat_template = read_chat_template(cfg.chat_template)
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ConfigError(f"model {cfg.model}: its tokenizer has neither a padding nor an end token; add one "
                              f"to the tokenizer (tokenizer.add_special_tokens) and save it again")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    return tokenizer


def read_chat_template(value: str) -> str:
    """``chat_template``: a Jinja template, or the path of a file holding one."""
    path = os.path.expanduser(value)
    if "{" not in value and os.path.isfile(path):
        with open(path, encoding="utf-8") as stream:
            return stream.read()
    if "{" not in value:
        raise ConfigError(f"chat_template {value!r}: neither a Jinja template nor a file; give the template, or the "
                          f"path of a .jinja file")
    return value


def load_model(cfg, tokenizer, labels=None):
    """The pretrained model of ``cfg.task_type`` (a sequence classifier's head of ``len(labels)`` outputs is new,
    drawn from the seeded stream, so every process draws the same), in ``model_dtype``, its padding token the
    tokenizer's; with ``lora.r`` > 0, a ``PeftModel`` whose adapters alone train."""
    transformers = require("transformers")
    _quiet(transformers)
    options = dict(revision=cfg.revision, trust_remote_code=cfg.trust_remote_code,
                   dtype=cfg.model_dtype if cfg.model_dtype == "auto" else getattr(__import__("torch"), cfg.model_dtype))
    if cfg.attn_implementation:
        options["attn_implementation"] = cfg.attn_implementation
    if cfg.task_type == "sequence_classification":
        options.update(num_labels=len(labels), id2label=dict(enumerate(map(str, labels))),
                       label2id={str(label): index for index, label in enumerate(labels)})
        auto = transformers.AutoModelForSequenceClassification
    else:
        auto = transformers.AutoModelForCausalLM
    try:
        model = auto.from_pretrained(os.path.expanduser(cfg.model), **options)
    except (ValueError, KeyError, ImportError) as error:  # no such architecture for this head, a missing kernel
        raise ConfigError(f"model {cfg.model}: {str(error).splitlines()[0]}") from None
    model.config.pad_token_id = tokenizer.pad_token_id
    # No key/value cache in the training and evaluation forwards: none is read, and a layer recomputed in backward
    # (activation checkpointing) would append to it twice. Generation asks for one itself.
    model.config.use_cache = False
    if getattr(model, "generation_config", None) is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if cfg.lora["r"] > 0:
        model = with_lora(model, cfg.lora, cfg.task_type)
    return model


def with_lora(model, lora: dict, task_type: str):
    """``model`` in a ``PeftModel`` with LoRA adapters of rank ``r`` on ``target_modules`` (null: peft's choice
    for the architecture, e.g. q_proj and v_proj); everything else frozen but ``modules_to_save`` (a classifier's
    new head trains too)."""
    peft = require("peft")
    targets = lora["target_modules"]
    config = peft.LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                             target_modules=targets[0] if targets == ["all-linear"] else targets,
                             modules_to_save=lora["modules_to_save"], task_type=_PEFT_TASK[task_type])
    try:
        with quiet_peft():
            return peft.get_peft_model(model, config)
    except ValueError as error:
        raise ConfigError(f"lora.target_modules {targets}: {str(error).splitlines()[0]}") from None


@contextlib.contextmanager
def quiet_peft():
    """peft reads transformers' deprecated ``is_gradient_checkpointing``: its FutureWarning is none of the user's."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def parameter_counts(model) -> tuple:
    """``(trainable, total)`` parameters."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())
