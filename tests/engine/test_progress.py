"""Progress output: bars on a terminal, plain lines where stderr is a file (``progress: auto``, the default),
bars always with ``progress: true``."""
import re
import sys

import pytest

from basetrainer.errors import ConfigError
from support.toy import ToyTrainer, toy_cfg

LINE = re.compile(r"^Train (epoch \d+/\d+|steps) \| \d+(/\d+)? \| loss [\d.e+-]+ \| lr [\d.e+-]+ \| samples/s \d+ "
                  r"\| eta \d+:\d\d:\d\d$")


def progress_lines(err):
    return [line for line in err.splitlines() if line.startswith("Train ")]


def test_in_a_file_progress_is_a_plain_line_every_refresh_and_at_each_epochs_end(capsys):
    ToyTrainer(toy_cfg(num_epochs=2, train_size=1920, batch_size=16, test_size=0, progress="auto")).run()
    err = capsys.readouterr().err
    lines = progress_lines(err)
    assert "\r" not in err
    assert [line.split(" | ")[:2] for line in lines] == [[f"Train epoch {epoch}/2", f"{done}/120"]  # 120 batches
                                                         for epoch in (1, 2) for done in (50, 100, 120)]
    assert all(LINE.match(line) for line in lines), lines


def test_in_a_file_a_run_of_max_iters_counts_its_steps(capsys):
    ToyTrainer(toy_cfg(num_epochs=None, max_iters=60, train_size=640, batch_size=16, test_size=0,
                       progress="auto")).run()  # 40 batches an epoch
    lines = progress_lines(capsys.readouterr().err)
    assert [line.split(" | ")[:2] for line in lines] == [["Train steps", "40/60"], ["Train steps", "60/60"]]
    assert lines[-1].endswith("eta 0:00:00")


def test_on_a_terminal_progress_is_a_bar(capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    ToyTrainer(toy_cfg(num_epochs=1, progress="auto")).run()
    err = capsys.readouterr().err
    assert "\r" in err and "Train epoch 1/1" in err and not any(LINE.match(line) for line in err.splitlines())


def test_progress_true_draws_bars_in_a_file_too(capsys):
    ToyTrainer(toy_cfg(num_epochs=1, progress=True)).run()
    assert "\r" in capsys.readouterr().err


def test_progress_takes_auto_true_or_false():
    with pytest.raises(ConfigError, match=r"^config key 'progress' expects one of auto, true, false, got str 'sometimes'"):
        ToyTrainer(toy_cfg(num_epochs=1, progress="sometimes"))
