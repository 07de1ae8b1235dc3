"""basetrainer's text task against the Hugging Face ``Trainer`` on the same fine-tuning: the same tiny model (a
Llama-like one, 2 decoder layers, written here with save_pretrained), the same LoRA adapters at the same initial
values, the same batches in the same order, the same optimizer and settings; the loss at each step side by side,
the time per step and the peak memory.

    python bench/hf_finetune.py [--steps 50] [--batch-size 8] [--accumulate 1] [--lora-r 16] [--threads 1] [--pairs 3]
                                [--out DIR]

Each side runs in a process of its own (``--side basetrainer`` or ``--side hf``, which this script starts) so that
its peak memory (the process's resident set, ``ru_maxrss``) is its own; both import torch, transformers and peft.
What is held equal, and how:

- the model: both load the folder with ``from_pretrained`` and add LoRA (rank ``--lora-r`` on every linear
  layer, alpha 2r, no dropout) through ``peft``; the HF side gets the adapters' initial values from the
  basetrainer side (``initial_adapters.pt``), which draws them from its seeded stream;
- the data: the bundled instructions, prompt and completion, the prompt's tokens masked, encoded by the task's
  encoder; the HF side trains on the batches in the order basetrainer's sampler drew for epoch 1
  (``train_sampling_strategy="sequential"`` over the dataset put in that order), padded by the same collator;
- the optimizer: AdamW (lr ``--lr``, betas 0.9/0.999, eps 1e-8, no weight decay), a constant lr without warm-up,
  the gradients' norm clipped to 1.0, float32 on the CPU, one process, no accumulation;
- the loss: the mean over the step's tokens that take a loss, the HF models' own (``num_items_in_batch``), over
  the batches of an accumulation window with ``--accumulate`` above 1 (``gradient_accumulation_steps``).

The time per step is the median over the steps after the first 5, from one optimizer step's end to the next,
nothing else in between (no evaluation, no checkpoint, logging of the loss at every step on both sides). The
two sides run one after the other ``--pairs`` times (A B A B ...); the ratio is the median of the pairs' ratios,
which holds when a shared machine's speed drifts between pairs.
Figures: bench/RESULTS.md, "Fine-tuning a transformer against the HF Trainer".
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import torch

WARM_UP = 5  # steps left out of the time per step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--accumulate", type=int, default=1, help="batches per optimizer step")
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--max-seq-len", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each side")
    parser.add_argument("--pairs", type=int, default=3, help="runs of each side, alternating")
    parser.add_argument("--out", default=None, help="a folder for the model, the runs and results.json")
    parser.add_argument("--side", choices=("basetrainer", "hf"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.side == "basetrainer":
        return basetrainer_side(args)
    if args.side == "hf":
        return hf_side(args)
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or scratch
        os.makedirs(out, exist_ok=True)
        from basetrainer.tasks.text.tiny_models import write_tiny_model

        write_tiny_model(os.path.join(out, "tiny-llama"), "llama", seed=args.seed)
        pairs = [{side: run_side(side, argv or sys.argv[1:], out) for side in ("basetrainer", "hf")}
                 for _ in range(args.pairs)]
        report(pairs, args)
        results = pairs[-1]
        with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as stream:
            json.dump(results, stream)


def run_side(side: str, argv, out: str) -> dict:
    command = [sys.executable, os.path.abspath(__file__), *argv, "--side", side, "--out", out]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    finished = subprocess.run(command, env=env, capture_output=True, text=True)
    if finished.returncode != 0:
        raise SystemExit(f"the {side} side failed ({finished.returncode}): {finished.stderr[-3000:]}")
    with open(os.path.join(out, f"{side}.json"), encoding="utf-8") as stream:
        return json.load(stream)


def config(args):
    from basetrainer.tasks.text.config import parse_config

    r = args.lora_r
    return parse_config([
        "--model", os.path.join(args.out, "tiny-llama"), "--work_dir", os.path.join(args.out, "basetrainer_run"),
        "--test_data", "", "--batch_size", str(args.batch_size), "--max_seq_len", str(args.max_seq_len),
        "--lr", str(args.lr), "num_epochs=null", f"max_iters={args.steps}", "optim_type=AdamW", "weight_decay=0",
        f"accumulate_grad_batches={args.accumulate}",
        "scheduler=constant", "num_warn_up=0", "clip_grad_norm=1.0", f"lora={{r: {r}, alpha: {2 * r}, dropout: 0, "
        f"target_modules: [all-linear]}}", f"seed={args.seed}", "progress=false", "loggers=[]", "log_freq=1000",
        "num_workers=0", "generate.count=0"])


def basetrainer_side(args):
    from basetrainer.data.samplers import find_sampler
    from basetrainer.engine.events import Callback
    from basetrainer.parallel import unwrap_model
    from basetrainer.tasks.text.trainer import TextTrainer

    class StepRecorder(Callback):
        """Each optimizer step's loss (the mean of its window's batches' losses) and the time it ended."""

        def __init__(self):
            super().__init__()
            self.losses, self.ends, self.window = [], [], []

        def on_batch_end(self, batch, logs=None):
            self.window.append(float(self.state.loss))
            if not self.state.accumulating:
                self.losses.append(sum(self.window) / len(self.window))
                self.ends.append(time.perf_counter())
                self.window = []

    recorder = StepRecorder()

    class Timed(TextTrainer):
        def build_callbacks(self, cfg, **kwargs):
            return [*super().build_callbacks(cfg), recorder]

    trainer = Timed(config(args))
    adapters = {name: value.detach().clone() for name, value in unwrap_model(trainer.model).state_dict().items()
                if ".lora_" in name}
    torch.save(adapters, os.path.join(args.out, "initial_adapters.pt"))
    order = list(find_sampler(trainer.train_loader).epoch_order())  # epoch 1's, one process: every index in order
    with open(os.path.join(args.out, "order.json"), "w", encoding="utf-8") as stream:
        json.dump(order, stream)
    trainer.run()
    write_side(args, "basetrainer", recorder.losses, recorder.ends)


def hf_side(args):
    import transformers
    from torch.utils.data import Subset

    from basetrainer.tasks.text import data
    from basetrainer.tasks.text.encoding import Collator
    from basetrainer.tasks.text.pretrained import load_model, load_tokenizer

    cfg = config(args)
    tokenizer = load_tokenizer(cfg)
    records = data.read_records(cfg.train_data, "train", cfg.task_type)
    samples = data.encode(records, data.build_encoder(records, tokenizer, cfg, "train_data"), packing=False)
    with open(os.path.join(args.out, "order.json"), encoding="utf-8") as stream:
        ordered = Subset(samples, json.load(stream))  # basetrainer's epoch-1 order, read in sequence
    model = load_model(cfg, tokenizer)
    initial = torch.load(os.path.join(args.out, "initial_adapters.pt"))
    missing = model.load_state_dict(initial, strict=False)
    assert not missing.unexpected_keys and set(initial) <= set(model.state_dict())
    losses, ends = [], []

    class StepRecorder(transformers.TrainerCallback):
        def on_log(self, arguments, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

        def on_step_end(self, arguments, state, control, **kwargs):
            ends.append(time.perf_counter())

    arguments = transformers.TrainingArguments(
        output_dir=os.path.join(args.out, "hf_run"), per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=args.accumulate,
        max_steps=args.steps, learning_rate=args.lr, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999,
        adam_epsilon=1e-8, max_grad_norm=1.0, lr_scheduler_type="constant", warmup_steps=0, logging_steps=1,
        logging_strategy="steps", save_strategy="no", eval_strategy="no", report_to=[], seed=args.seed,
        use_cpu=True, dataloader_num_workers=0, train_sampling_strategy="sequential", disable_tqdm=True,
        remove_unused_columns=False, optim="adamw_torch")
    trainer = transformers.Trainer(model=model, args=arguments, train_dataset=ordered,
                                   data_collator=Collator(tokenizer.pad_token_id), callbacks=[StepRecorder()])
    trainer.train()
    write_side(args, "hf", losses, ends)


def write_side(args, side: str, losses, ends):
    seconds = [b - a for a, b in zip(ends, ends[1:])][WARM_UP:]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with open(os.path.join(args.out, f"{side}.json"), "w", encoding="utf-8") as stream:
        json.dump({"losses": losses[:args.steps], "step_s": statistics.median(seconds), "peak_rss": peak}, stream)


def report(pairs, args):
    ours, theirs = pairs[-1]["basetrainer"], pairs[-1]["hf"]
    print(f"tiny Llama-like model, LoRA r {args.lora_r} on every linear layer, batch {args.batch_size} x "
          f"{args.accumulate} accumulated, "
          f"max_seq_len {args.max_seq_len}, AdamW lr {args.lr:g} constant, clip 1.0, {args.steps} steps, float32 "
          f"CPU, {args.threads} thread(s)")
    ratios = [pair["basetrainer"]["step_s"] / pair["hf"]["step_s"] for pair in pairs]
    times = "; ".join(f"{1000 * pair['basetrainer']['step_s']:.1f} vs {1000 * pair['hf']['step_s']:.1f}"
                      for pair in pairs)
    print(f"time per step (median after {WARM_UP}), basetrainer vs HF Trainer, ms: {times}; ratio "
          f"{statistics.median(ratios):.3f} (median of {len(pairs)}; {min(ratios):.3f} to {max(ratios):.3f})")
    if any(pair["basetrainer"]["losses"] != ours["losses"] or pair["hf"]["losses"] != theirs["losses"]
           for pair in pairs):
        print("the losses differ between pairs: the runs are not deterministic")
    print(f"peak memory (process RSS): basetrainer {ours['peak_rss'] / 2 ** 20:.0f} MiB, HF Trainer "
          f"{theirs['peak_rss'] / 2 ** 20:.0f} MiB")
    differences = [abs(a - b) for a, b in zip(ours["losses"], theirs["losses"])]
    print(f"loss at each step: largest difference {max(differences):.2e} (step "
          f"{differences.index(max(differences)) + 1}), first step's {differences[0]:.2e}")
    print("step | basetrainer | HF Trainer | difference")
    for step, (a, b) in enumerate(zip(ours["losses"], theirs["losses"]), start=1):
        print(f"{step} | {a:.6f} | {b:.6f} | {a - b:+.2e}")


if __name__ == "__main__":
    main()
