"""The example with its stderr redirected to a file, as under SLURM, CI or ``nohup``: plain progress lines at
an interval, and not one carriage return."""
import re

from support import EXAMPLES
from support.processes import popen_python

REFRESH_EVERY = 50  # batches between two progress lines (ProgressBar.refresh_every)


def test_the_examples_stderr_in_a_file_holds_a_progress_line_per_interval_and_no_carriage_return(tmp_path):
    with open(tmp_path / "stderr.log", "w") as stderr, open(tmp_path / "stdout.log", "w") as stdout:
        example = popen_python([EXAMPLES / "example.py", "--num_epochs", "1", "--input_size", "16", "16",
                                "--batch_size", "16", "--work_dir", tmp_path / "work",
                                "--net_type", "shufflenet_v2_x0_5"],  # the lines, not the model: a fast one
                               cwd=tmp_path, stdout=stdout, stderr=stderr)
        assert example.wait(timeout=240) == 0, (tmp_path / "stderr.log").read_text()[-3000:]
    text = (tmp_path / "stderr.log").read_text()
    assert "\r" not in text
    batches = int(re.search(r"batches of 16 \((\d+) per epoch\)", text).group(1))
    lines = [line for line in text.splitlines() if line.startswith("Train epoch 1/1 | ")]
    expected = [*range(REFRESH_EVERY, batches, REFRESH_EVERY), batches]
    assert [line.split(" | ")[1] for line in lines] == [f"{done}/{batches}" for done in expected]
    assert all(re.fullmatch(r"Train epoch 1/1 \| \d+/\d+ \| loss [\d.]+ \| lr [\d.e-]+ \| samples/s \d+ \| "
                            r"eta \d+:\d\d:\d\d", line) for line in lines), lines
