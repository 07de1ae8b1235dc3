"""A study's run folder as the classification task leaves it, written by hand: what the study's table reads."""
import json

import yaml

REACHED = {"metric": "Acc", "value": 90.0, "mode": "max", "reached": True, "reached_value": 91.0, "time_s": 21.5,
           "step": 40, "epoch": 2, "samples": 2560}  # log/target.json of a run that reached Acc 90


def write_run(run_dir, accuracies, times, target=None, lr=0.05, accumulate=1, speeds=(100.0, 300.0, 320.0),
              memory=(1.0, 1.5, 1.25)):
    """Writes ``run_dir``'s config.yaml, log/history.jsonl (one epoch per accuracy, with its training seconds so far,
    samples/s and peak memory) and, given ``target``, log/target.json; returns ``run_dir``."""
    (run_dir / "log").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"lr": lr, "accumulate_grad_batches": accumulate}))
    records = [{"epoch": epoch, "lr": lr, "train": {"loss": 1.0}, "test": {"loss": 0.5, "Acc": accuracy},
                "time_s": seconds, "samples_per_s": speed, "peak_memory_gib": gib}
               for epoch, (accuracy, seconds, speed, gib) in enumerate(zip(accuracies, times, speeds, memory), 1)]
    (run_dir / "log" / "history.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    if target is not None:
        (run_dir / "log" / "target.json").write_text(json.dumps(target))
    return run_dir
