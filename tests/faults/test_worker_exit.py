"""launch() at the end of a job: a worker that dies while exiting after its work is done neither fails
the job nor stops the others (the teardown abort that gloo's threads caused at interpreter exit)."""
import textwrap

import pytest

from support.processes import run_python

pytestmark = pytest.mark.slow


TEARDOWN_SCRIPT = textwrap.dedent('''
    import atexit, os, sys, time
    from basetrainer.distributed.launch import launch

    def main(out):
        rank = os.environ["RANK"]
        if rank == "1":
            atexit.register(os.abort)  # dies while exiting, its work done
        else:
            time.sleep(2)  # still working when rank 1 dies
        with open(f"{out}.{rank}", "w") as f:
            f.write("done")

    if __name__ == "__main__":
        launch(main, 2, args=(sys.argv[1],))
''')


def test_a_worker_that_dies_while_exiting_after_its_work_neither_fails_the_job_nor_stops_the_others(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(TEARDOWN_SCRIPT)
    result = run_python([script, tmp_path / "out"], timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "worker rank 1 finished its work, then was killed by SIGABRT while exiting" in result.stderr
    assert (tmp_path / "out.0").read_text() == "done"  # rank 0 was left to finish


INTERRUPTED_REPORT_SCRIPT = textwrap.dedent('''
    import os, sys, time
    from basetrainer.distributed.launch import launch

    class SlowToDescribe(Exception):
        described = 0

        def __str__(self):  # rank 1 is still reporting its failure when the launcher stops it
            SlowToDescribe.described += 1
            if SlowToDescribe.described == 2:  # the report's own str(); traceback's first swallows any exception
                time.sleep(3)
            return "rank 1's own failure"

    def main():
        if os.environ["RANK"] == "1":
            raise SlowToDescribe()
        time.sleep(0.5)
        raise ValueError("rank 0 failed first")

    if __name__ == "__main__":
        launch(main, 2)
''')


def test_the_launcher_s_stop_arriving_while_a_worker_reports_its_failure_adds_no_traceback(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(INTERRUPTED_REPORT_SCRIPT)
    result = run_python([script], timeout=120)
    assert result.returncode == 1
    # launch() raises the first failure in the script (its traceback is the script's); rank 1's report, cut short
    # by a KeyboardInterrupt, used to add multiprocessing's "Process-2:" traceback
    assert "KeyboardInterrupt" not in result.stderr and "Process-2" not in result.stderr, result.stderr[-3000:]
    assert "rank 1's own failure" in result.stderr  # the earliest failure, by the time it happened
