"""A study's table: a run's row from the files it wrote, study.csv and study.md, and the study's answer in words."""
import csv

import pytest

from basetrainer.study.plan import StudyPlan
from basetrainer.study.process import Outcome
from basetrainer.study.table import read_row, run_row, summary, write_row, write_tables
from support.study_runs import REACHED, write_run

FINISHED = Outcome(returncode=0, seconds=30.0)


def study(tmp_path, **settings):
    values = {"batch_sizes": [32, 64], "base_batch_size": 64, "target_value": 90.0, "out": str(tmp_path), **settings}
    return StudyPlan.from_settings(values)


def test_a_finished_runs_row_holds_what_its_files_say(tmp_path):
    run_dir = write_run(tmp_path / "run_bs32", [80.0, 91.0, 89.0], [10.0, 21.0, 33.0], target=REACHED)
    row = run_row(str(run_dir), 32, study(tmp_path, processes=2), FINISHED)["row"]
    assert row == {"batch_size": 32, "global_batch": 64, "lr": 0.05, "samples_per_s": 310.0,
                   "epoch_s": pytest.approx(11.0), "epochs": 3, "target_epoch": 2, "target_step": 40,
                   "target_time_s": 21.5, "best": 91.0, "final": 89.0, "training_s": 33.0, "peak_memory_gib": 1.5,
                   "status": "ok"}


def test_the_curve_is_the_metric_against_training_time(tmp_path):
    run_dir = write_run(tmp_path / "run_bs32", [80.0, 91.0, 89.0], [10.0, 21.0, 33.0], target=REACHED)
    assert run_row(str(run_dir), 32, study(tmp_path), FINISHED)["curve"] == [[10.0, 80.0], [21.0, 91.0], [33.0, 89.0]]


def test_the_lr_is_the_one_the_run_trained_at_and_the_global_batch_counts_its_accumulation(tmp_path):
    run_dir = write_run(tmp_path / "run_bs64", [95.0], [5.0], lr=0.2, accumulate=2)  # 0.05 x 256 / 64, as scaled
    row = run_row(str(run_dir), 64, study(tmp_path, processes=2), FINISHED)["row"]
    assert row["global_batch"] == 256 and row["lr"] == 0.2


def test_a_run_that_did_not_reach_the_target_has_no_time_to_it(tmp_path):
    missed = {**REACHED, "reached": False, **dict.fromkeys(("reached_value", "time_s", "step", "epoch", "samples"))}
    run_dir = write_run(tmp_path / "run_bs32", [80.0, 85.0, 86.0], [10.0, 21.0, 33.0], target=missed)
    row = run_row(str(run_dir), 32, study(tmp_path), FINISHED)["row"]
    assert (row["target_epoch"], row["target_step"], row["target_time_s"]) == (None, None, None)
    assert row["best"] == 86.0


def test_a_run_that_failed_before_training_is_a_row_that_says_so(tmp_path):
    (tmp_path / "run_bs512").mkdir()
    outcome = Outcome(returncode=1, seconds=4.0, error="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    row = run_row(str(tmp_path / "run_bs512"), 512, study(tmp_path), outcome)["row"]
    assert row["status"] == "out of memory" and row["global_batch"] == 512
    assert all(row[key] is None for key in ("lr", "samples_per_s", "epochs", "best", "final", "target_time_s"))


def test_a_lower_is_better_metric_has_its_lowest_value_as_best(tmp_path):
    run_dir = write_run(tmp_path / "run_bs32", [80.0, 91.0, 89.0], [10.0, 21.0, 33.0])
    row = run_row(str(run_dir), 32, study(tmp_path, target_metric="test/loss", target_mode="min"), FINISHED)["row"]
    assert (row["best"], row["final"]) == (0.5, 0.5)


def test_a_row_file_reads_back_as_written(tmp_path):
    run_dir = write_run(tmp_path / "run_bs32", [80.0, 91.0, 89.0], [10.0, 21.0, 33.0], target=REACHED)
    result = run_row(str(run_dir), 32, study(tmp_path), FINISHED)
    assert read_row(str(run_dir)) is None
    write_row(str(run_dir), result)
    assert read_row(str(run_dir)) == result


def rows(tmp_path):
    fast = write_run(tmp_path / "run_bs32", [80.0, 91.0, 89.0], [10.0, 21.0, 33.0], target=REACHED, lr=0.025)
    slow = write_run(tmp_path / "run_bs64", [70.0, 85.0, 92.5], [8.0, 16.0, 24.0],
                     target={**REACHED, "time_s": 23.9, "epoch": 3, "step": 30}, lr=0.05)
    plan = study(tmp_path)
    return [run_row(str(fast), 32, plan, FINISHED)["row"], run_row(str(slow), 64, plan, FINISHED)["row"]]


def test_study_csv_has_a_column_per_field_and_a_row_per_run_numbers_exact(tmp_path):
    table = rows(tmp_path)
    csv_path, _ = write_tables(table, str(tmp_path), "Acc")
    with open(csv_path, newline="") as stream:
        read = list(csv.DictReader(stream))
    assert [row["batch_size"] for row in read] == ["32", "64"]
    assert float(read[1]["target_time_s"]) == 23.9 and read[0]["status"] == "ok"
    assert float(read[0]["epoch_s"]) == table[0]["epoch_s"]  # as Python writes it: nothing lost


def test_study_md_is_a_table_with_the_answer_below(tmp_path):
    _, md_path = write_tables(rows(tmp_path), str(tmp_path), "Acc")
    lines = open(md_path).read().splitlines()
    assert lines[0].startswith("| batch | global batch | lr |") and "| best Acc | final Acc |" in lines[0]
    assert lines[2].startswith("| 32 | 32 | 0.025 | 310 | 11.0 | 3 | 2 | 40 | 21.5 | 91.00 | 89.00 |")
    assert lines[-1].startswith("Soonest to the target: batch 32 (global 32: 21.5 s of training, epoch 2).")


def test_the_answer_names_the_final_values_by_batch(tmp_path):
    assert summary(rows(tmp_path), "Acc").endswith("Final Acc: 89.00 at batch 32, 92.50 at batch 64.")


def test_the_answer_says_when_no_run_reached_the_target(tmp_path):
    table = [{**row, "target_time_s": None} for row in rows(tmp_path)]
    assert summary(table, "Acc").startswith("No run reached the target.")
