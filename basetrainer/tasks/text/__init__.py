"""Fine-tuning pretrained Hugging Face transformers as a ready task, beside image classification and object
detection; its parts, split as the detection task's are:

- data: :mod:`~basetrainer.tasks.text.bundled` (the generated offline datasets), :mod:`~basetrainer.tasks.text.data` (local files, saved datasets and hub
  datasets, read through ``datasets``), :mod:`~basetrainer.tasks.text.encoding` (fields and chat templates to tokens, the completion-only
  labels, packing, padding);
- modelling: :mod:`~basetrainer.tasks.text.hub` (hub names and folders, offline), :mod:`~basetrainer.tasks.text.pretrained` (the model and tokenizer from
  ``from_pretrained``, LoRA through ``peft``), :mod:`~basetrainer.tasks.text.tiny_models` (tiny Llama-, Qwen2- and GPT-2-like models
  saved as a hub model is), :mod:`~basetrainer.tasks.text.losses`;
- what a run shows: :mod:`~basetrainer.tasks.text.recorders` (loss, perplexity, accuracy, tokens per second), :mod:`~basetrainer.tasks.text.generation`
  (completions of fixed prompts);
- saving back: :mod:`~basetrainer.tasks.text.save` (``model_final/`` with ``save_pretrained``, the merged folder of ``basetrainer export``);
- the pipeline: :mod:`~basetrainer.tasks.text.settings` and :mod:`~basetrainer.tasks.text.config` (its config keys
  and command line), :mod:`~basetrainer.tasks.text.trainer` (``TextTrainer`` and ``basetrainer train --task text``).

Importing this package imports none of ``transformers``, ``peft`` or ``datasets``: they are the ``hf`` extra's,
imported where they are used, with a one-line error naming ``pip install "basetrainer[hf]"`` when missing.
"""
from .config import get_parser, parse_config
from .trainer import TextTrainer, main, prepare, prepare_data, run, train

__all__ = ["TextTrainer", "get_parser", "main", "parse_config", "prepare", "prepare_data", "run", "train"]
