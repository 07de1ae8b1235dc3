"""A small GPT-style language model (attention and MLP blocks) trained on text every Python installation carries.

The text is the source of a few modules of Python's standard library, read as bytes (a vocabulary of
256, so there is nothing to download and no tokenizer to fit): the first 90% trains, the last 10%
tests. Every window of ``seq_len + 1`` bytes is one sample: the model reads ``seq_len`` and predicts
each next byte. The log shows the loss, the test loss and its perplexity, and tokens per second.

    python examples/language_model.py                                   # one process (a GPU if any)
    python examples/language_model.py max_iters=300 lr=3e-3             # any key below as key=value
    python examples/language_model.py --distributed --gpu_id 0 1        # DDP over 2 processes
    python examples/language_model.py --distributed --gpu_id 0 1 strategy=fsdp   # each block an FSDP unit
    python examples/language_model.py --distributed --gpu_id 0 1 2 3 parallel.mesh.tp=2 parallel.mesh.dp_shard=2
                                                        # tensor parallel x FSDP on a 2 x 2 mesh (the model's plan)
    python examples/language_model.py --distributed --gpu_id 0 1 parallel.mesh.pp=2 parallel.pipeline.schedule=1F1B
                                                        # a 2-stage pipeline: embeddings and blocks 0-1, then
                                                        # blocks 2-3, the norm and the head

Without CUDA, ``--distributed`` starts that many CPU processes (gloo).
"""
import argparse
import math
import os
import sys
import sysconfig

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from basetrainer import EngineTrainer, launch
from basetrainer.callbacks import LogHistory, LossesRecorder, ModelCheckpoint
from basetrainer.callbacks.run_throughput import RunThroughput
from basetrainer.config import add_override_arguments, parser_config
from basetrainer.config.kinds import Boolean, Integer, Number, Text
from basetrainer.config.overrides import overrides_first
from basetrainer.config.schema import Schema, Setting
from basetrainer.engine.events import Callback
from basetrainer.engine.settings import LOOP_SETTINGS
from basetrainer.errors import BaseTrainerError, ConfigError
from basetrainer.utils.console import exit_with
from basetrainer.utils.log import get_logger, set_logger

# Modules of the standard library whose source is the corpus (about 470 KB on Python 3.11).
SOURCES = ("argparse.py", "textwrap.py", "difflib.py", "inspect.py", "pathlib.py", "typing.py")

# The keys of this script, declared as the trainer's are (engine/settings.py), and the trainer's with
# this task's defaults: every value is checked before anything starts.
SETTINGS = LOOP_SETTINGS.replace("max_iters", default=200).replace("num_epochs", default=None, nullable=True) \
    .replace("eval_every_n_iters", default=100).replace("clip_grad_norm", default=1.0) \
    .replace("work_dir", default="work_dirs/language_model") + Schema([
        Setting("seq_len", Integer(minimum=1), 128, "bytes the model reads per sample", unit="tokens"),
        Setting("batch_size", Integer(minimum=1), 32, "samples per batch and per process"),
        Setting("lr", Number(0, 1, above=True), 1e-3, "AdamW's learning rate"),
        Setting("weight_decay", Number(0, 1), 0.1, "AdamW's weight decay"),
        Setting("dim", Integer(minimum=1), 128, "width of the residual stream"),
        Setting("heads", Integer(minimum=1), 4, "attention heads (dim must be a multiple)"),
        Setting("layers", Integer(minimum=1), 4, "transformer blocks"),
        Setting("dropout", Number(0, 1, below=True), 0.0, "dropout in attention and MLP"),
        Setting("log_freq", Integer(minimum=1), 25, "a log line every log_freq batches", unit="batches"),
        Setting("distributed", Boolean(), False, "one process per gpu_id (DDP, or FSDP)"),
        Setting("config_file", Text(non_empty=True, meaning="a path"), None, "a YAML file of these keys",
                nullable=True),
    ])


class ByteWindows(Dataset):
    """Non-overlapping windows of ``seq_len + 1`` bytes of ``data``: (the first ``seq_len``, the last ``seq_len``)."""

    def __init__(self, data: torch.Tensor, seq_len: int):
        self.data, self.seq_len = data, seq_len

    def __len__(self):
        return (len(self.data) - 1) // self.seq_len

    def __getitem__(self, index):
        window = self.data[index * self.seq_len: (index + 1) * self.seq_len + 1].long()
        return window[:-1], window[1:]


def corpus() -> torch.Tensor:
    """The bytes of ``SOURCES``, read from this interpreter's standard library."""
    folder = sysconfig.get_paths()["stdlib"]
    text = b"".join(open(os.path.join(folder, name), "rb").read() for name in SOURCES)
    return torch.frombuffer(bytearray(text), dtype=torch.uint8)


class Attention(nn.Module):
    """Causal multi-head self-attention. Its projections are separate Linears and its head count is read off
    their outputs, so under tensor parallelism each process computes its own heads (``TENSOR_PARALLEL_PLAN``)."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.head_dim, self.dropout = dim // heads, dropout
        self.query, self.key, self.value = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        batch, length, _ = x.shape
        q, k, v = (projection(x).view(batch, length, -1, self.head_dim).transpose(1, 2)
                   for projection in (self.query, self.key, self.value))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.out(y.transpose(1, 2).reshape(batch, length, -1))


class Block(nn.Module):
    """Pre-norm transformer block: attention, then a 4x MLP, each added to the residual stream."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.norm1, self.attention = nn.LayerNorm(dim), Attention(dim, heads, dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a final norm and the next-token logits."""

    def __init__(self, vocab: int, seq_len: int, dim: int, heads: int, layers: int, dropout: float):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim ({dim}) must be a multiple of heads ({heads})")
        self.tokens, self.positions = nn.Embedding(vocab, dim), nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, dropout) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)

    def tensor_parallel_plan(self, tp_size: int) -> dict:
        """How the blocks split under ``parallel.mesh.tp`` (basetrainer.parallel.tensor_parallel): each process
        computes ``heads / tp`` attention heads and a ``1 / tp`` slice of the MLP's hidden layer, one all-reduce
        after each; embeddings, norms and the head stay whole."""
        heads = self.blocks[0].attention.out.in_features // self.blocks[0].attention.head_dim
        if heads % tp_size:
            raise ConfigError(f"heads ({heads}) must be a multiple of parallel.mesh.tp ({tp_size}): each "
                              f"process computes whole heads; change heads or tp")
        return {"blocks.*.attention.query": "colwise", "blocks.*.attention.key": "colwise",
                "blocks.*.attention.value": "colwise", "blocks.*.attention.out": "rowwise",
                "blocks.*.mlp.0": "colwise", "blocks.*.mlp.2": "rowwise"}

    def forward(self, tokens):
        # Under a pipeline (parallel.mesh.pp) a process holds some stages only: the modules of the others are None
        # (their blocks pass the residual stream through), and a later stage receives that stream, not tokens.
        x = tokens
        if self.tokens is not None:
            x = self.tokens(tokens) + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        if self.norm is not None:
            x = self.norm(x)
        return self.head(x) if self.head is not None else x


class NextTokenLoss(nn.Module):
    """Cross-entropy of every position's logits against the next byte."""

    def forward(self, logits, targets):
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class TokensPerSecond(Callback):
    """After each evaluation: tokens trained per second so far (all processes), in steady state (the first
    batches, which hold compilation, and the evaluations left out) and over the whole run, and the test loss's
    perplexity. The rates are RunThroughput's, which LogHistory's closing line gives in samples/s."""

    def __init__(self, seq_len: int):
        super().__init__()
        self.seq_len = seq_len
        self.rate = RunThroughput()

    def on_train_begin(self, logs=None):
        self.rate.train_begin(self.trainer.state)

    def on_epoch_begin(self, epoch, logs=None):
        self.rate.epoch_begin()

    def on_batch_end(self, batch, logs=None):
        self.rate.batch_end(self.trainer.state)

    def on_test_begin(self, logs=None):
        self.rate.test_begin()

    def on_evaluation_end(self, logs=None):
        self.rate.evaluation_end()
        state, logs = self.trainer.state, logs or {}
        steady, whole_run = self.rate.steady(state), self.rate.whole_run(state)
        test_loss = logs.get("test", {}).get("loss")
        if self.trainer.is_main_process and test_loss is not None and whole_run:
            steady_words = f"{steady * self.seq_len:.0f} in steady state, " if steady else ""
            get_logger().info("step %d: tokens/s (all processes) %s%.0f over the whole run; test loss %.4f, "
                              "perplexity %.2f",
                              state.global_step, steady_words, whole_run * self.seq_len, test_loss,
                              math.exp(test_loss))


class LanguageModelTrainer(EngineTrainer):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.logger = set_logger(level="info", logfile=os.path.join(cfg.work_dir, "log", "train.log"),
                                 is_main_process=self.is_main_process)
        data = corpus()
        split = int(len(data) * 0.9)
        self.train_text, self.test_text = data[:split], data[split:]
        self.build(cfg)

    def build_train_loader(self, cfg):
        return self.build_dataloader(ByteWindows(self.train_text, cfg.seq_len), cfg.batch_size, phase="train",
                                     stream=cfg.max_iters is not None)

    def build_test_loader(self, cfg):
        return self.build_dataloader(ByteWindows(self.test_text, cfg.seq_len), cfg.batch_size, phase="test",
                                     shuffle=False)

    def build_model(self, cfg):
        model = GPT(256, cfg.seq_len, cfg.dim, cfg.heads, cfg.layers, cfg.dropout)
        return self.build_model_parallel(model)

    def build_criterion(self, cfg):
        return NextTokenLoss()

    def build_optimizer(self, cfg):
        return torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def build_callbacks(self, cfg):
        log_dir = os.path.join(cfg.work_dir, "log")
        return [LossesRecorder(), TokensPerSecond(cfg.seq_len),
                LogHistory(log_dir, log_freq=cfg.log_freq, indicators=["loss"], plot=False),
                ModelCheckpoint(model_dir=os.path.join(cfg.work_dir, "model"), indicator="loss", mode="min")]


def main(cfg):  # runs in every process
    LanguageModelTrainer(cfg).run()


def get_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-c", "--config_file", default=None, help="a YAML file of the keys below")
    parser.add_argument("--distributed", action="store_true", help="one process per gpu_id (DDP, or FSDP)")
    parser.add_argument("--gpu_id", nargs="+", type=int, default=[0], help="GPUs; without CUDA, CPU processes")
    flagged = ("config_file", "distributed", "gpu_id")
    parser.set_defaults(**{key: value for key, value in SETTINGS.defaults().items() if key not in flagged})
    return add_override_arguments(parser)


def read_config(argv=None):
    """The config for ``argv``: the defaults above, flags, then ``key=value``. A key that is not in
    ``SETTINGS``, or a value its declaration does not allow, is a one-line ConfigError."""
    argv = overrides_first(sys.argv[1:] if argv is None else argv, set(SETTINGS.names()))  # --gpu_id 0 1 k=v
    parser = get_parser()
    return parser_config(parser.parse_intermixed_args(argv), parser=parser, strict=True, argv=argv,
                         save_args=False, schema=SETTINGS)


if __name__ == "__main__":  # needed: the processes launch() starts import this file
    try:
        config = read_config()
        launch(main, num_gpus_per_machine=len(config.gpu_id), distributed=config.distributed, args=(config,))
    except BaseTrainerError as error:  # one line naming the problem, and its exit code
        exit_with(error)
