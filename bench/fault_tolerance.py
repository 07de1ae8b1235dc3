"""What a dead process costs: replica groups through torchft against torchrun's restart with ``resume: auto``.

For 2 and 3 groups of one gloo process (the toy classifier of tests/support/workers/replica_group_worker.py, 1,536
samples, batches of 8, 3 epochs, each step padded to ``--step-seconds`` as if its compute took that long), four runs:

- **ddp**: plain DDP over as many processes, no fault: the step time without replica groups;
- **groups**: the replica groups, no fault: the step time with a quorum and an all-reduce through torchft per step,
  and the final loss;
- **groups + kill**: the last group SIGKILLs itself at a random step (``--seed``), during the gradient all-reduce,
  and launch() restarts it: the steps the survivors lost (dropped), the longest they stalled (their longest step
  less the median one), the seconds from the death until the restarted group trains again, of which the join
  (quorum and state transfer), and the final loss;
- **torchrun + kill**: plain DDP under ``torchrun --max-restarts 1`` with ``resume: auto`` and a checkpoint every 5
  steps, the last process SIGKILLed at the same step: the steps lost (trained again from the last checkpoint) and
  the seconds from the death until training goes on.

The final loss is the mean training loss of the last epoch on group 0 (on rank 0 for DDP).

    python bench/fault_tolerance.py [--groups 2 3] [--seed 0] [--step-seconds 0.05]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, os.pardir, "tests", "support", "workers", "replica_group_worker.py")
SAMPLES, BATCH, EPOCHS = 1536, 8, 3


def run(out, settings, faults=(), torchrun=None):
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", RUST_LOG="warn")
    args = [WORKER, out, json.dumps(settings), json.dumps(list(faults))]
    if torchrun:
        args = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={torchrun}", "--max-restarts=1",
                *args]
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"a run failed ({settings}):\n{done.stderr[-3000:]}")
    return {group: [json.loads(line) for line in open(os.path.join(out, name))]
            for group, name in ((int(name[5]), name) for name in os.listdir(out)
                                if name.startswith("group") and "_rank" not in name)}


def step_time(lines) -> float:
    times = [line["time"] for line in lines]
    return statistics.median(b - a for a, b in zip(times, times[1:]))


def final_loss(lines) -> float:
    last = max(line["epoch"] for line in lines)
    return statistics.mean(line["loss"] for line in lines if line["epoch"] == last and line["committed"])


def measure(root, groups, kill_step, step_seconds):
    base = {"train_size": SAMPLES, "batch_size": BATCH, "num_epochs": EPOCHS, "step_seconds": step_seconds}
    ft = {**base, "fault_tolerance": {"replica_groups": groups, "timeout": 60}}
    ddp = run(os.path.join(root, f"ddp{groups}"), {**base, "processes": groups})[0]
    clean = run(os.path.join(root, f"groups{groups}"), ft)
    victim = groups - 1
    killed = run(os.path.join(root, f"kill{groups}"), ft,
                 [{"group": victim, "attempt": 0, "at": "allreduce", "step": kill_step}])
    survivor = killed[0]
    died = max(line["time"] for line in killed[victim] if line["attempt"] == 0)
    back = next(line for line in killed[victim] if line["attempt"] == 1)
    torchrun = run(os.path.join(root, f"torchrun{groups}"), {**base, "resume": "auto"},
                   [{"group": 0, "attempt": 0, "rank": groups - 1, "at": "step", "step": kill_step}],
                   torchrun=groups)[0]
    before = [line for line in torchrun if line["attempt"] == 0]
    after = [line for line in torchrun if line["attempt"] == 1]
    return {
        "groups": groups, "kill_step": kill_step,
        "ddp_step_ms": 1000 * step_time(ddp), "groups_step_ms": 1000 * step_time(clean[0]),
        "lost_steps": sum(not line["committed"] for line in survivor),
        "stalled_s": max(b["time"] - a["time"] for a, b in zip(survivor, survivor[1:])) - step_time(survivor),
        "back_after_s": back["time"] - died, "join_s": back["healed_in"],
        "loss_clean": final_loss(clean[0]), "loss_killed": final_loss(survivor), "loss_ddp": final_loss(ddp),
        "torchrun_lost_steps": before[-1]["step"] - after[0]["step"] + 1,
        "torchrun_back_after_s": after[0]["time"] - before[-1]["time"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-seconds", type=float, default=0.05)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print("| groups | kill at step | step, DDP | step, groups | survivors' steps lost | survivors stalled | "
          "killed group trains again after | of which joining | final loss: no kill / kill / DDP | "
          "torchrun + resume: steps lost | torchrun: trains again after |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as root:
        for groups in args.groups:
            r = measure(root, groups, rng.randint(10, 40), args.step_seconds)
            print(f"| {groups} | {r['kill_step']} | {r['ddp_step_ms']:.1f} ms | {r['groups_step_ms']:.1f} ms | "
                  f"{r['lost_steps']} | {r['stalled_s']:.2f} s | {r['back_after_s']:.1f} s | {r['join_s']:.2f} s | "
                  f"{r['loss_clean']:.4f} / {r['loss_killed']:.4f} / {r['loss_ddp']:.4f} | "
                  f"{r['torchrun_lost_steps']} | {r['torchrun_back_after_s']:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
