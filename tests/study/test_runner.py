"""A study started again: the runs it finished are kept, with the same rows, and none is started again (a study
with runs left starts processes: tests/e2e/test_study.py)."""
import pytest

from basetrainer.study.plan import StudyPlan
from basetrainer.study.process import Outcome
from basetrainer.study.runner import run_study
from basetrainer.study.table import run_row, write_row
from support.study_runs import REACHED, write_run


@pytest.fixture
def finished_study(tmp_path):
    """A study of batches 32 and 64 whose two runs are done (their row files written)."""
    plan = StudyPlan.from_settings({"batch_sizes": [32, 64], "base_batch_size": 64, "target_value": 90.0,
                                    "out": str(tmp_path / "study")})
    for batch_size, time_s in ((32, 21.5), (64, 23.9)):
        run_dir = write_run(tmp_path / "study" / f"run_bs{batch_size}", [80.0, 91.0, 89.0], [10.0, 21.0, 33.0],
                            target={**REACHED, "time_s": time_s}, lr=0.05 * batch_size / 64)  # scaled as the run did
        write_row(str(run_dir), run_row(str(run_dir), batch_size, plan, Outcome(0, 30.0)))
    return plan


def test_a_study_whose_runs_are_done_keeps_them_and_says_so(finished_study):
    lines = []
    results = run_study(finished_study, echo=lines.append)  # the fast tier fails any test that starts a process
    assert [result["row"]["batch_size"] for result in results] == [32, 64]
    assert lines == ["study: run 1/2, batch 32: done before, kept (global 32, lr 0.025; Acc 90 reached at epoch 2, "
                     "21.5 s of training; best 91, final 89)",
                     "study: run 2/2, batch 64: done before, kept (global 64, lr 0.05; Acc 90 reached at epoch 2, "
                     "23.9 s of training; best 91, final 89)"]


def test_the_tables_of_a_study_started_again_are_the_same(finished_study, tmp_path):
    run_study(finished_study, echo=lambda line: None)
    first = {name: (tmp_path / "study" / name).read_bytes() for name in ("study.csv", "study.md")}
    (tmp_path / "study" / "study.csv").unlink()
    run_study(finished_study, echo=lambda line: None)
    assert {name: (tmp_path / "study" / name).read_bytes() for name in first} == first


def test_the_study_writes_its_settings_and_a_picture(finished_study, tmp_path):
    pytest.importorskip("matplotlib")
    run_study(finished_study, echo=lambda line: None)
    assert (tmp_path / "study" / "study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "study" / "study.json").is_file()
