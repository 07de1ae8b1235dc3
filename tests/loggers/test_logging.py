"""set_logger: file and console on the main process, warnings only elsewhere, no side effects; optional pictures."""
import logging
import sys

import pytest

from basetrainer.utils import plots
from basetrainer.utils.log import get_logger, set_logger


def test_main_process_logs_to_file_and_console(tmp_path, capsys):
    logfile = tmp_path / "log.txt"
    logger = set_logger("info", str(logfile))
    logger.info("hello %d", 7)
    logger.debug("not shown at info")
    assert "hello 7" in logfile.read_text()
    assert "not shown" not in logfile.read_text()
    assert "hello 7" in capsys.readouterr().err


def test_returns_the_basetrainer_logger_that_does_not_propagate(tmp_path):
    logger = set_logger("debug", str(tmp_path / "log.txt"))
    assert logger is get_logger() is logging.getLogger("basetrainer")
    assert logger.level == logging.DEBUG
    assert logger.propagate is False


def test_calling_twice_does_not_duplicate_handlers_or_lines(tmp_path):
    logfile = tmp_path / "log.txt"
    once = list(set_logger("info", str(logfile)).handlers)
    logger = set_logger("info", str(logfile))
    logger.info("once")
    assert len(logger.handlers) == len(once)  # (other tests' capture handlers may be there too)
    assert logfile.read_text().count("once") == 1


def test_creates_the_log_folder(tmp_path):
    logfile = tmp_path / "a" / "b" / "log.txt"
    set_logger("info", str(logfile)).info("x")
    assert logfile.is_file()


def test_other_ranks_log_warnings_only_and_write_no_file(tmp_path, capsys):
    logfile = tmp_path / "rank1.log"
    logger = set_logger("debug", str(logfile), is_main_process=False)
    logger.info("progress line")
    logger.warning("disk almost full")
    err = capsys.readouterr().err
    assert logger.level == logging.WARNING
    assert "progress line" not in err and "disk almost full" in err
    assert not logfile.exists()


def test_a_log_file_on_a_full_disk_says_so_once_and_the_console_keeps_every_line(tmp_path, capsys):
    from support.full_disk import fill, small_filesystem

    with small_filesystem(tmp_path / "disk", "1m") as disk:
        logfile = f"{disk}/log/train.log"
        logger = set_logger("info", logfile)
        logger.info("first line")
        fill(disk)
        for number in range(3):
            logger.info("line %d %s", number, "x" * 5000)  # more than the page tmpfs may have left
        set_logger(level="info")  # closes the file before the disk goes
    err = capsys.readouterr().err
    assert err.count(f"warning: {logfile}: no space left on device; log lines go to the console only") == 1
    assert "Traceback" not in err and "--- Logging error ---" not in err
    assert all(f"line {number}" in err for number in range(3))


def test_leaves_root_and_other_libraries_loggers_alone(tmp_path):
    root, other = logging.getLogger(), logging.getLogger("some_library")
    before = (list(root.handlers), root.level, list(other.handlers), other.level, other.propagate)
    set_logger("debug", str(tmp_path / "log.txt"))
    assert (list(root.handlers), root.level, list(other.handlers), other.level, other.propagate) == before


def test_unknown_level_is_a_one_line_error():
    with pytest.raises(Exception, match="unknown level 'loud'"):
        set_logger(level="loud")


def test_training_curves_png_has_a_panel_per_indicator(tmp_path):
    rows = [{"epoch": e, "lr": 0.1, "train_loss": 1.0 / (e + 1), "test_loss": 1.2 / (e + 1), "test_Acc": 50.0 + e}
            for e in range(3)]
    path = plots.plot_training_curves(rows, str(tmp_path / "curves.png"))
    assert path and open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    titles = [ax.get_title() for ax in plots.training_curves_figure(rows).axes if ax.get_visible()]
    assert titles == ["loss", "Acc", "lr"]


def test_a_curve_spanning_decades_is_drawn_on_a_log_scale_but_the_lr_never():
    rows = [{"epoch": e, "lr": 0.1 * 0.01 ** e, "train_loss": 300.0 / 10 ** e, "train_Acc": 50.0 + e}
            for e in range(4)]
    scales = {ax.get_title(): ax.get_yscale() for ax in plots.training_curves_figure(rows).axes}
    assert scales == {"loss": "log", "Acc": "linear", "lr": "linear"}


def test_without_matplotlib_pictures_are_skipped_with_one_message(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setattr(plots, "_warned_missing", False)
    rows = [{"epoch": 0, "lr": 0.1, "train_loss": 1.0}]
    with caplog.at_level(logging.WARNING, logger="basetrainer"):
        assert plots.plot_training_curves(rows, str(tmp_path / "training_curves.png")) is None
        assert plots.plot_confusion_matrix([[1, 0], [0, 1]], str(tmp_path / "cm.png")) is None
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["matplotlib is not installed: pip install matplotlib to get training_curves.png "
                        "(pictures are skipped)"]
    assert not list(tmp_path.iterdir())
