"""What the quick start's run and "your own task"'s run show, copied into the documentation from real runs.

::

    python docs/_scripts/what_the_run_shows.py    # from the repository root; 2-3 minutes on a 2-core CPU

Runs, each in a fresh temporary folder as a new user would (the digits are written to its data/digits):

- ``python examples/example.py num_epochs=2`` (the bundled digits, CPU), and copies its log
  (``work_dir/log/train.log``), the list of the files it wrote under ``work_dir`` and its two pictures (the
  training curves and the confusion matrix) to ``docs/_generated/quickstart/``;
- ``python my_task.py --num_epochs 2``, the script of docs/guides/own-task.md, and copies what it prints
  and the list of the files it wrote to ``docs/_generated/own-task/``.

The quick start and the own-task guide include these files, and the figures their prose quotes from them are
read from them at build time (docs/_ext/run_facts.py, as MyST substitutions). Run it again when what a run
prints or writes changes: tests/docs/test_what_the_run_shows.py fails when a log line shown has a shape that
the code no longer prints, or when what the prose says of the run (at chance, the loaders keep up) no longer
holds for it.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "docs" / "_generated"
OWN_TASK_PAGE = REPO / "docs" / "guides" / "own-task.md"
EPOCHS = "2"
PICTURES = ("training_curves.png", "confusion_matrix.png")


def run(command, folder) -> str:
    """What ``command`` prints (stdout, then stderr), run with this Python in ``folder``; stops on a failure."""
    result = subprocess.run([sys.executable, *command], cwd=folder, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    return result.stdout + result.stderr


def file_list(work_dir: Path, shown_as: str) -> str:
    """One line per file under ``work_dir``, as ``shown_as/relative/path`` and its size."""
    files = sorted(path for path in work_dir.rglob("*") if path.is_file())
    width = max(len(f"{shown_as}/{path.relative_to(work_dir)}") for path in files)
    return "".join(f"{shown_as}/{path.relative_to(work_dir)}".ljust(width + 2) + f"{_size(path.stat().st_size)}\n"
                   for path in files)


def _size(size: int) -> str:
    for unit in ("B", "KB", "MB"):
        if size < 1024 or unit == "MB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024


def quickstart(folder: Path) -> None:
    run([str(REPO / "examples" / "example.py"), f"num_epochs={EPOCHS}"], folder)
    work_dir = folder / "work_dirs" / "classification"
    out = OUT / "quickstart"
    out.mkdir(parents=True, exist_ok=True)
    log = (work_dir / "log" / "train.log").read_text(encoding="utf-8")
    (out / "log.txt").write_text(log.replace(str(folder) + os.sep, ""), encoding="utf-8")
    (out / "files.txt").write_text(file_list(work_dir, "work_dirs/classification"), encoding="utf-8")
    for picture in PICTURES:
        shutil.copyfile(work_dir / "log" / picture, out / picture)


def own_task(folder: Path) -> None:
    page = OWN_TASK_PAGE.read_text(encoding="utf-8")
    [script] = re.findall(r"^```python\n(.*?)^```$", page, re.DOTALL | re.MULTILINE)
    (folder / "my_task.py").write_text(script, encoding="utf-8")
    printed = run(["my_task.py", "--num_epochs", EPOCHS], folder)
    out = OUT / "own-task"
    out.mkdir(parents=True, exist_ok=True)
    (out / "output.txt").write_text(printed, encoding="utf-8")
    (out / "files.txt").write_text(file_list(folder / "work_dirs" / "my_task", "work_dirs/my_task"), encoding="utf-8")


def main():
    for make in (quickstart, own_task):
        with tempfile.TemporaryDirectory() as folder:
            make(Path(folder))
            print(f"{make.__name__}: written to {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
