"""``basetrainer lr-find`` and ``basetrainer batch-find`` on the bundled digits, end to end: the printed
suggestion is a ready override, the files are written, and a finder whose first size fails leaves nothing."""
import csv
import re

from support.processes import run_command, run_python

FAST = ["--net_type", "shufflenet_v2_x0_5", "--input_size", "8", "8", "--batch_size", "16", "--no-progress"]


def tool(name, tmp_path, *flags):
    return run_python(["-m", "basetrainer", name, *FAST, "--work_dir", tmp_path / "work", *flags], cwd=tmp_path)


def test_lr_find_on_the_quick_start_suggests_a_rate_where_the_loss_still_falls_as_an_override(tmp_path):
    # The command as the tuning guide gives it, on the quick start's own task and defaults (100 steps, 1 thread).
    result = run_command(["basetrainer", "lr-find", "--no-progress", "--work_dir", tmp_path / "work"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert re.fullmatch(r"lr=\d[\d.e+-]*", lines[-1]) and lines[-3].startswith("lr range test: ")
    assert "stopped: " in lines[-3]  # it diverged before lr 10, and the sweep saw it
    folder = tmp_path / "work" / "lr_find"
    with open(folder / "lr_find.csv") as stream:
        rows = list(csv.DictReader(stream))
    lowest = min(rows, key=lambda row: float(row["smoothed_loss"]))
    suggestion = float(lines[-1][len("lr="):])
    assert float(rows[0]["lr"]) == 1e-7 and suggestion < float(lowest["lr"])
    assert lines[-1][len("lr="):] in {f"{float(row['lr']):.3g}" for row in rows}  # one of the rates swept
    assert (folder / "lr_find.png").read_bytes()[:4] == b"\x89PNG" and (folder / "config.yaml").is_file()
    assert not (folder / "model").exists()  # the tool saves no checkpoint


def test_batch_find_prints_the_table_and_the_recommended_size_and_writes_the_csv(tmp_path):
    result = tool("batch-find", tmp_path, "--max_memory", 64, "--steps", 1, "--max_trials", 4)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    # The run trains at batches of 16 with SGD: a larger size carries the lr that follows it.
    override = re.fullmatch(r"batch_size=(\d+)( 'lr_scaling=\{rule: linear, base_batch_size: 16\}')?", lines[-1])
    assert override and bool(override[2]) == (override[1] != "16")
    assert any(line.split()[:3] == ["batch", "size", "fits"] for line in lines)
    assert "can end at a lower accuracy" in result.stdout and "basetrainer study" in result.stdout
    with open(tmp_path / "work" / "batch_find" / "batch_find.csv") as stream:
        rows = list(csv.DictReader(stream))
    assert [int(row["batch_size"]) for row in rows] == [2, 4, 8, 16]
    assert override[1] in {row["batch_size"] for row in rows if row["fits"] == "True"}


def test_batch_find_whose_first_size_does_not_fit_is_one_line_and_leaves_nothing(tmp_path):
    result = tool("batch-find", tmp_path, "--first_size", 512, "--max_memory", 0.001, "--steps", 1)
    assert result.returncode == 2
    assert re.fullmatch(r"error: first_size 512 does not fit: its steps took [\d.]+ MiB, over the budget of 0.001 MiB; "
                        r"lower first_size, or raise max_memory\n", result.stderr.splitlines(keepends=True)[-1])
    assert not (tmp_path / "work").exists()
