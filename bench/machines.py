"""Slow links, measured: DDP, local SGD, PowerSGD and DiLoCo between 2 machines whose links tbf limits to 1 Gbit/s
and 100 Mbit/s.

Two machines (network namespaces on a private bridge, tests/support/machines.py), one gloo process each, started as
the running guide says (``launch`` with ``num_machines=2``, ``machine_rank``, ``dist_url=tcp://<machine 0>:<port>``);
DiLoCo as the fault-tolerance guide says instead: ``torchft_lighthouse`` on machine 0, each machine one replica group
(``fault_tolerance.group_id`` its number, ``lighthouse: http://m0:<port>``). Each machine's link limited with
``tc``'s tbf to the rate (what it sends). For each rate, task and variant:

- **step**: the mean wall time of a training step (``on_batch_begin`` to ``on_batch_end``: forward, backward, the
  communication and the averaging) on rank 0, over the steps after the first ``--skip`` (DDP's first steps build
  its buckets; PowerSGD sends full gradients before its ``start_step``);
- **MB/step**: what each machine's interface sent in those same windows, from its namespace's own counters
  (``/proc/self/net/dev`` read by the process in the namespace; headers and acknowledgements included), the mean
  over the steps and over the 2 machines; **run MB**: each machine's counter over the whole job (rendezvous,
  evaluation, checkpoints included), read from outside by the harness;
- **quality** at an equal number of samples (every variant the same steps of the same batch): the last
  evaluation's test loss (the language model) or top-1 (the quick start), of the replicas' average under local SGD,
  of the outer weights under DiLoCo (machine 0's group; the groups hold them alike).

Tasks: ``quickstart`` is the digits example (examples/example.py: ResNet-18 at 32x32, 44.7 MB of fp32 parameters,
batch 64 per process), a few steps only (DDP sends its gradients in full: about 4 s a step at 100 Mbit/s);
``lm`` is examples/language_model.py (a byte-level GPT, dim 128, 4 blocks, 0.8 M parameters, AdamW) at batch 16 x
64 bytes per process (the example's 32 x 128 is 4x the compute for the same bytes), 160 steps, for its test loss.

DiLoCo's period is local SGD's (8 steps, one fragment: the whole model each sync), with its default outer step
(SGD, lr 0.7, Nesterov momentum 0.9).

Needs root (``ip netns``, ``tc``); otherwise it exits 0 saying why. It removes its namespaces whatever happens.

    sudo python bench/machines.py [--rates 1gbit 100mbit] [--tasks quickstart lm] [--variants ddp ...] [--json F]
                                  [--plot docs/_static/slow_links.png]
    python bench/machines.py --from F [--plot P]    # the table (and picture) of a saved --json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.join(REPO, "examples"))

VARIANTS = {  # the same keys for both tasks
    "ddp": [],
    "local SGD /8": ["local_sgd.period=8"],
    "PowerSGD r4": ["grad_compression=powersgd", "powersgd.rank=4", "powersgd.start_step=2"],
    "DiLoCo /8": ["local_sgd.mode=diloco", "local_sgd.period=8", "fault_tolerance.replica_groups=2"],
}
REPLICA_GROUPS = {"DiLoCo /8"}  # one replica group per machine, meeting at a lighthouse, not one process group
# The steps timed (after ``skip``) are a multiple of local SGD's period: each mean holds whole periods.
TASKS = {"quickstart": {"steps": 19, "skip": 3}, "lm": {"steps": 160, "skip": 8}}
LM_OVERRIDES = ["batch_size=16", "seq_len=64"]  # a quarter of the example's compute a step, the same bytes
PORT = 29400


# ---------------------------------------------------------------- in each machine: one process of the job

def tx_bytes(interface="eth0") -> int:
    """What this network namespace's ``interface`` has sent (the process's own namespace's counters)."""
    with open("/proc/self/net/dev") as stream:
        for line in stream:
            name, _, fields = line.partition(":")
            if name.strip() == interface:
                return int(fields.split()[8])
    raise RuntimeError(f"no interface {interface!r} in /proc/self/net/dev")


def clock_callback(out):
    from basetrainer.engine.events import HIGHEST, LOWEST, Callback, Event

    class StepClock(Callback):
        """Each training step's wall time and the bytes this machine sent during it; the last evaluation's logs."""

        priorities = {Event.BATCH_BEGIN: LOWEST, Event.BATCH_END: HIGHEST}  # noqa: RUF012 - as every callback's

        def __init__(self):
            super().__init__()
            self.steps, self.test = [], {}

        def on_batch_begin(self, batch, logs=None):
            self.sent, self.clock = tx_bytes(), time.perf_counter()

        def on_batch_end(self, batch, logs=None):
            self.steps.append((time.perf_counter() - self.clock, tx_bytes() - self.sent))

        def on_evaluation_end(self, logs=None):
            self.test = {key: float(value) for key, value in (logs or {}).get("test", {}).items()
                         if isinstance(value, (int, float))}

        def on_train_end(self, logs=None):
            self.on_evaluation_end(logs) if (logs or {}).get("test") else None
            with open(out, "w") as stream:
                json.dump({"steps": self.steps, "test": self.test}, stream)

    return StepClock()


def quickstart_worker(cfg, out):
    import torch

    from basetrainer.tasks.classification import ClassificationTrainer

    class Clocked(ClassificationTrainer):
        def build_callbacks(self, cfg, **kwargs):
            return [*super().build_callbacks(cfg, **kwargs), clock_callback(out)]

    torch.set_num_threads(1)
    Clocked(cfg).run()


def lm_worker(cfg, out):
    import torch
    from language_model import ByteWindows, LanguageModelTrainer

    class Clocked(LanguageModelTrainer):
        def build_callbacks(self, cfg):
            return [*super().build_callbacks(cfg), clock_callback(out)]

        def build_train_loader(self, cfg):  # replica groups deal an epoch's order; the example streams for max_iters
            if not cfg.fault_tolerance["replica_groups"]:
                return super().build_train_loader(cfg)
            return self.build_dataloader(ByteWindows(self.train_text, cfg.seq_len), cfg.batch_size, phase="train")

    torch.set_num_threads(1)
    Clocked(cfg).run()


def worker(args):
    """One machine's part of the job: its config, then launch with this machine's rank."""
    from basetrainer.distributed.launch import launch

    steps, overrides = TASKS[args.task]["steps"], [*VARIANTS[args.variant], f"work_dir={args.work_dir}"]
    groups = args.variant in REPLICA_GROUPS
    if groups:  # this machine is a replica group of its own; the address is the lighthouse's
        overrides += [f"fault_tolerance.group_id={args.machine_rank}", f"fault_tolerance.lighthouse={args.dist_url}"]
    machines = {} if groups else {"num_machines": 2, "machine_rank": args.machine_rank, "dist_url": args.dist_url}
    if args.task == "quickstart":
        from basetrainer.tasks.classification import parse_config
        cfg = parse_config(["--distributed", "--no-progress", "--gpu_id", "0", "--opts", f"max_iters={steps}",
                            *[f"{key}={value}" for key, value in machines.items()], "eval_every_n_iters=0",
                            *overrides])
        main = quickstart_worker
    else:
        from language_model import read_config
        cfg = read_config(["--distributed", "--gpu_id", "0", f"max_iters={steps}", f"eval_every_n_iters={steps}",
                           "log_freq=50", *LM_OVERRIDES, *overrides])
        main = lm_worker
    out = f"{args.out}.{args.machine_rank}.json"
    launch(main, 1, **machines, args=(cfg, out))


# ---------------------------------------------------------------- the driver: the machines, one job per cell

def run_job(machines, root, task, variant, port, timeout):
    """Starts the job on both machines and waits; each machine's step figures and its counter over the job."""
    from basetrainer.tasks.classification import parse_config, prepare_data

    prepare_data(parse_config([]))  # the digits, written once here rather than by both machines at once
    name = f"{task}-{list(VARIANTS).index(variant)}-{port}"
    url, out = f"tcp://{machines[0].address}:{port}", os.path.join(root, name)
    before = [machines.bytes_sent(m) for m in machines]
    started, processes, lighthouse = time.monotonic(), [], None
    if variant in REPLICA_GROUPS:  # the lighthouse on machine 0, as the fault-tolerance guide starts it
        url = f"http://{machines[0].hostname}:{port}"
        lighthouse = machines.lighthouse(machines[0], port, f"{out}.lighthouse.log")
    for m in machines:
        with open(f"{out}.{m.index}.log", "w") as log:
            processes.append(machines.run(m, [sys.executable, os.path.abspath(__file__), "--worker", "--task", task,
                                              "--variant", variant, "--machine-rank", m.index, "--dist-url", url,
                                              "--work-dir", os.path.join(root, name), "--out", out,
                                              "--steps", TASKS[task]["steps"]],
                                          env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1"),
                                          cwd=REPO, stdout=log, stderr=subprocess.STDOUT))
    try:
        codes = [p.wait(timeout=max(1, timeout - (time.monotonic() - started))) for p in processes]
    finally:
        if lighthouse is not None:
            lighthouse.kill()
            lighthouse.wait()
    wall = time.monotonic() - started
    if codes != [0, 0]:
        tails = [_tail(f"{out}.{i}.log") for i in range(2)]
        raise RuntimeError(f"{task} {variant}: exit codes {codes}\n" + "\n---\n".join(tails))
    per_machine = []
    for m in machines:
        with open(f"{out}.{m.index}.json") as stream:
            per_machine.append(json.load(stream))
    return {"machines": per_machine, "run bytes": [machines.bytes_sent(m) - b for m, b in zip(machines, before)],
            "wall": wall}


def _tail(path, size=1500) -> str:
    with open(path) as stream:
        return stream.read()[-size:]


def summarize(task, result) -> dict:
    skip = TASKS[task]["skip"]
    timed = [m["steps"][skip:] for m in result["machines"]]
    test = result["machines"][0]["test"]
    return {"steps": len(result["machines"][0]["steps"]), "timed steps": len(timed[0]),
            "step s": statistics.mean(seconds for seconds, _ in timed[0]),
            "MB/step": statistics.mean(sent for steps in timed for _, sent in steps) / 1e6,
            "run MB": [sent / 1e6 for sent in result["run bytes"]], "wall s": result["wall"],
            "loss": test.get("loss"), "acc": test.get("Acc")}


def report(rows):
    print(f"{'rate':<9}{'task':<11}{'variant':<14}{'steps':>6}{'timed':>6}{'step s':>8}{'MB/step':>9}"
          f"{'run MB (m0, m1)':>17}{'test loss':>10}{'acc %':>7}{'wall s':>8}")
    for (rate, task, variant), f in rows.items():
        run = ", ".join(f"{mb:.0f}" for mb in f["run MB"])
        loss = f"{f['loss']:.4f}" if f["loss"] is not None else "-"
        acc = f"{f['acc']:.2f}" if f["acc"] is not None else "-"
        print(f"{rate:<9}{task:<11}{variant:<14}{f['steps']:>6}{f['timed steps']:>6}{f['step s']:>8.3f}"
              f"{f['MB/step']:>9.2f}{run:>17}{loss:>10}{acc:>7}{f['wall s']:>8.0f}")


def plot(rows, path):
    """Step time per variant at each rate, a panel per task; each bar labelled with its MB a step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(row["task"] for row in rows))
    rates = list(dict.fromkeys(row["rate"] for row in rows))
    figure, panels = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
    for axes, task in zip(panels[0], tasks):
        variants = list(dict.fromkeys(row["variant"] for row in rows if row["task"] == task))
        width = 0.8 / len(variants)
        for i, variant in enumerate(variants):
            cells = [next((r for r in rows if (r["rate"], r["task"], r["variant"]) == (rate, task, variant)), None)
                     for rate in rates]
            xs = [k + (i - (len(variants) - 1) / 2) * width for k in range(len(rates))]
            bars = axes.bar(xs, [c["step s"] if c else 0 for c in cells], width, label=variant.replace("ddp", "DDP"))
            axes.bar_label(bars, [f"{c['MB/step']:.1f} MB" if c else "" for c in cells], fontsize=7)
        axes.set_xticks(range(len(rates)), [rate.replace("gbit", " Gbit/s").replace("mbit", " Mbit/s")
                                            for rate in rates])
        axes.set_ylabel("seconds per training step")
        axes.set_title(TITLES.get(task, task), fontsize=10)
        axes.margins(y=0.25)  # room above the bars for the legend
        axes.legend(fontsize=8, ncol=2, loc="upper left")
        axes.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


TITLES = {"quickstart": "quick start: ResNet-18, 45 MB of gradients", "lm": "language model: GPT, 3.5 MB of gradients"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", nargs="+", default=["1gbit", "100mbit"], help="tc rates; 'none': no limit")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), metavar="NAME")
    parser.add_argument("--steps", type=int, default=None, help="every task this many steps (a quick look)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a job may take")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    parser.add_argument("--plot", default=None, help="draw the step times into this PNG")
    parser.add_argument("--from", dest="source", default=None, help="report (and plot) a --json file; run nothing")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--task", "--variant", "--dist-url", "--work-dir", "--out"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--machine-rank", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps:
        for figures in TASKS.values():
            figures["steps"] = args.steps
    if args.worker:
        return worker(args)
    if args.source:
        with open(args.source) as stream:
            saved = json.load(stream)
        report({(r["rate"], r["task"], r["variant"]): r for r in saved})
        return plot(saved, args.plot) if args.plot else None
    from support import machines as harness

    why = harness.unavailable()
    if why:
        print(f"bench/machines.py skipped: {why}")
        return
    rows, port = {}, PORT
    with harness.Machines(2) as machines, tempfile.TemporaryDirectory() as root:
        for rate in args.rates:
            for m in machines:
                if rate == "none":  # the bare veth: no qdisc of ours left from an earlier rate
                    subprocess.run(["tc", "-n", m.namespace, "qdisc", "del", "dev", machines.interface, "root"],
                                   capture_output=True, check=False)
                else:
                    machines.limit_rate(m, rate)
            for task in args.tasks:
                for variant in args.variants:
                    port += 1
                    rows[rate, task, variant] = summarize(task, run_job(machines, root, task, variant, port,
                                                                        args.timeout))
                    print(rate, task, variant, rows[rate, task, variant], flush=True)
    if args.json:
        with open(args.json, "w") as stream:
            json.dump([{"rate": r, "task": t, "variant": v, **f} for (r, t, v), f in rows.items()], stream, indent=1)
    report(rows)
    if args.plot:
        plot([{"rate": r, "task": t, "variant": v, **f} for (r, t, v), f in rows.items()], args.plot)


if __name__ == "__main__":
    main()
