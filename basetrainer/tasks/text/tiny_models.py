"""Tiny pretrained-style models, made here and saved as a hub model is: for the bundled example, the tests and the
benchmark, with nothing fetched.

:func:`write_tiny_model` trains a byte-level BPE tokenizer with ``tokenizers`` on the bundled texts
(:mod:`~basetrainer.tasks.text.bundled`), builds a decoder of one of three architectures from its config with small sizes, and writes
both with ``save_pretrained``: ``config.json``, ``model.safetensors``, ``generation_config.json`` and the
tokenizer's files. ``AutoModelForCausalLM.from_pretrained(folder)`` then loads it exactly as it loads a model of
the hub. The three architectures differ where the task must handle them:

- ``llama``: a ``<s>`` added before every text, ``</s>`` as end, no padding token, untied embeddings;
- ``qwen2``: no start token, ``<|endoftext|>`` as padding and end, a ChatML chat template, tied embeddings;
- ``gpt2``: ``<|endoftext|>`` as start and end, no padding token, learned positions, ``Conv1D`` layers.

Every architecture's tokenizer has a chat template, so that chat data trains on each.
"""
import os

from . import bundled
from .hub import require_transformers

ARCHITECTURES = ("llama", "qwen2", "gpt2")
CHAT_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SIZES = dict(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, positions=256)


def train_tokenizer(architecture: str, vocab_size: int = 512):
    """A ``PreTrainedTokenizerFast``: byte-level BPE trained on the bundled texts, with ``architecture``'s special
    tokens (see the module docstring)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    transformers = require_transformers()

    specials = {"llama": ["<unk>", "<s>", "</s>"], "qwen2": ["<|endoftext|>"], "gpt2": ["<|endoftext|>"]}[architecture]
    chat = ["<|im_start|>", "<|im_end|>"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials + chat, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(bundled.corpus(), trainer=trainer)
    if architecture == "llama":  # a start token before every text, as Llama's tokenizer adds
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tokenizer.token_to_id("<s>"))])
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokens = {"llama": dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>"),
              "qwen2": dict(eos_token="<|endoftext|>", pad_token="<|endoftext|>"),
              "gpt2": dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>")}
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, **tokens[architecture],
                                                additional_special_tokens=chat, model_max_length=SIZES["positions"])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def model_config(architecture: str, tokenizer):
    """The architecture's config with the small sizes of ``SIZES`` and the tokenizer's special tokens."""
    transformers = require_transformers()
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
               pad_token_id=tokenizer.pad_token_id)
    size = SIZES
    if architecture == "gpt2":
        return transformers.GPT2Config(vocab_size=len(tokenizer), n_embd=size["hidden"], n_layer=size["layers"],
                                       n_head=size["heads"], n_inner=size["intermediate"], n_positions=size["positions"],
                                       **ids)
    common = dict(vocab_size=len(tokenizer), hidden_size=size["hidden"], num_hidden_layers=size["layers"],
                  num_attention_heads=size["heads"], num_key_value_heads=size["kv_heads"],
                  intermediate_size=size["intermediate"], max_position_embeddings=size["positions"], **ids)
    if architecture == "llama":
        return transformers.LlamaConfig(tie_word_embeddings=False, **common)
    return transformers.Qwen2Config(tie_word_embeddings=True, **common)


def write_tiny_model(folder, architecture: str = "llama", seed: int = 0) -> str:
    """Writes a tiny causal LM of ``architecture`` (llama, qwen2 or gpt2) and its tokenizer to ``folder`` with
    ``save_pretrained`` (weights drawn with ``seed``); returns ``folder``. A folder that already holds one is left
    as it is."""
    import torch

    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture {architecture!r}: choose one of {', '.join(ARCHITECTURES)}")
    folder = os.fspath(folder)
    if os.path.isfile(os.path.join(folder, "model.safetensors")):
        return folder
    transformers = require_transformers()
    transformers.utils.logging.disable_progress_bar()
    tokenizer = train_tokenizer(architecture)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(model_config(architecture, tokenizer))
    staging = f"{folder}.partial"
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    os.replace(staging, folder) if not os.path.exists(folder) else _move_into(staging, folder)
    return folder


def _move_into(staging: str, folder: str) -> None:
    """The files of ``staging`` moved into the existing (empty or partial) ``folder``."""
    for name in os.listdir(staging):
        os.replace(os.path.join(staging, name), os.path.join(folder, name))
    os.rmdir(staging)
