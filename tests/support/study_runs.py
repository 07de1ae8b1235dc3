"""A study's run folder as the engine leaves it, written by hand: what the study's table reads."""
import json

REACHED = {"metric": "Acc", "value": 90.0, "mode": "max", "reached": True, "reached_value": 91.0, "time_s": 21.5,
           "step": 40, "epoch": 2, "samples": 2560}  # log/target.json of a run that reached Acc 90


def write_run(run_dir, accuracies, times, target=None, lr=0.05, accumulate=1, speeds=(100.0, 300.0, 320.0),
              memory=(1.0, 1.5, 1.25)):
    """Writes ``run_dir``'s log/run_summary.json (one epoch per accuracy, with its training seconds so far, samples/s
    and peak memory; the lr and accumulation the run trained with) and, given ``target``, log/target.json; returns
    ``run_dir``."""
    (run_dir / "log").mkdir(parents=True)
    records = [{"epoch": epoch, "time_s": seconds, "samples_per_s": speed, "peak_memory_gib": gib,
                "test": {"loss": 0.5, "Acc": accuracy}}
               for epoch, (accuracy, seconds, speed, gib) in enumerate(zip(accuracies, times, speeds, memory), 1)]
    summary = {"epochs": records, "training_s": times[-1] if times else 0.0, "samples": 0, "steps": 0,
               "peak_memory_gib": max(memory[:len(records)], default=None), "lr": lr,
               "accumulate_grad_batches": accumulate, "finished": True}
    (run_dir / "log" / "run_summary.json").write_text(json.dumps(summary))
    if target is not None:
        (run_dir / "log" / "target.json").write_text(json.dumps(target))
    return run_dir
