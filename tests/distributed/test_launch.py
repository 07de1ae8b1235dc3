"""launch() from a user's script: how workers start, and the script that forgot its main guard."""
import multiprocessing
import textwrap

import pytest

from support.processes import run_python

LOADER_SCRIPT = textwrap.dedent('''
    import multiprocessing, os, sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from basetrainer.distributed.launch import launch

    with open(sys.argv[1], "a") as f:  # the script's top level: counted each time it runs
        f.write(f"{os.getpid()}\\n")

    def main(out, launcher):
        loader = DataLoader(TensorDataset(torch.arange(32.0)), batch_size=8, num_workers=2)
        for epoch in range(2):
            assert sum(len(b[0]) for b in loader) == 32
        with open(out + f".{os.environ['RANK']}", "w") as f:
            f.write(f"{multiprocessing.get_start_method()} {os.environ['JOB_RUN']} "
                    f"{multiprocessing.parent_process().pid == launcher}")

    if __name__ == "__main__":
        for run in ("first", "second"):  # the environment as the launcher has it at each launch
            os.environ["JOB_RUN"] = run
            launch(main, 2, args=(f"{sys.argv[2]}.{run}", os.getpid()))
''')

pytestmark = pytest.mark.slow  # every test here starts a job


def test_workers_start_their_loaders_as_the_launching_process_would(tmp_path):
    script, counter, out = tmp_path / "job.py", tmp_path / "top_level_runs", tmp_path / "start_method"
    script.write_text(LOADER_SCRIPT)
    result = run_python([script, counter, out], timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    expected = multiprocessing.get_start_method()
    assert [(tmp_path / f"start_method.{run}.{rank}").read_text() for run in ("first", "second") for rank in (0, 1)] \
        == [f"{expected} {run} True" for run in ("first", "second") for rank in (0, 1)]
    if expected == "fork":
        # the launcher and 2 ranks per launch; the ranks' 2 epochs x 2 loader workers import nothing again
        assert len(counter.read_text().split()) == 5


def run_launching_script(tmp_path, call, main_body="    print('trained')\n", timeout=120):
    """Runs a script whose main() is ``main_body`` (by default it prints 'trained'), ending with the lines ``call``."""
    script = tmp_path / "launching.py"
    script.write_text("from basetrainer.distributed.launch import launch\n\n"
                      "def main():\n" + main_body + "\n" + call)
    return run_python([script], timeout=timeout)


def test_a_launch_call_without_a_main_guard_is_refused_in_one_line(tmp_path):
    result = run_launching_script(tmp_path, "launch(main, 2)\n")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines()[-1] == (
        'error: launch() is called at the top level of the script without a guard: spawned workers import the '
        'script again; put the call under if __name__ == "__main__":')
    assert "Traceback" not in result.stderr


def test_a_guarded_launch_call_at_the_top_level_runs(tmp_path):
    result = run_launching_script(tmp_path, "if __name__ == '__main__':\n    launch(main, 2)\n")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("trained") == 2


def test_workers_exit_although_a_library_left_a_thread_pool_running(tmp_path):
    # torch.compile leaves such a pool; the workers' exit used to wait for its threads forever
    body = ("    from concurrent.futures import ThreadPoolExecutor\n"
            "    pool = ThreadPoolExecutor(2)\n"
            "    print('trained', pool.submit(lambda: 1).result())\n"
            "    main.pool = pool\n")
    result = run_launching_script(tmp_path, "if __name__ == '__main__':\n    launch(main, 2)\n", body, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("trained") == 2  # the two workers' lines may interleave
    assert "while exiting" not in result.stderr
