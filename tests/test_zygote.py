"""The zygote (tests/support/zygote.py) runs a job as a new Python would: the same output, exit code and
view of its arguments, module, paths, directory and environment, for scripts, ``-m`` and ``-c``."""
import subprocess

import pytest

from support.processes import ZYGOTE, python_env, run_python
from support.zygote import Zygote

pytestmark = pytest.mark.slow

SHOW = """\
import os, sys
print(__name__, os.path.basename(__file__) if "__file__" in globals() else "-", sys.argv[1:], sys.path[0] or "''",
      os.getcwd(), os.environ.get("JOB_SETTING"), getattr(__spec__, "name", None), file=sys.stderr)
"""
SCRIPTS = {
    "shows_itself": SHOW,
    "exits_3": "import sys\nprint('out')\nsys.exit(3)\n",
    "exits_with_a_message": "import sys\nsys.exit('a message')\n",
    "raises": "def fail():\n    raise ValueError('broken')\n\nfail()\n",
    "interrupted": "raise KeyboardInterrupt\n",
    "leaves_a_file_open": "f = open('left_open.txt', 'w')\nf.write('flushed at exit')\n",
    "leaves_a_thread_running": "import threading, time\n"
                               "threading.Thread(target=lambda: (time.sleep(0.5), print('joined'))).start()\n",
    "draws_unseeded": "import random, numpy, torch\nprint(torch.rand(1).item(), file=__import__('sys').stderr)\n"
                      "print(random.random(), numpy.random.rand())\n",
}


def both(tmp_path, args, **kwargs):
    """The job's results in a new Python and in a child of the zygote, each in a directory of its own."""
    results = []
    for fresh in (True, False):
        cwd = tmp_path / ("fresh" if fresh else "zygote")
        cwd.mkdir(exist_ok=True)
        for name, source in SCRIPTS.items():
            (cwd / f"{name}.py").write_text(source)
        result = run_python(args(cwd), cwd=cwd, env={"JOB_SETTING": "set"}, fresh=fresh, **kwargs)
        results.append(result)
    return [(r.returncode, r.stdout, r.stderr.replace(str(tmp_path / ("fresh" if fresh else "zygote")), "CWD"))
            for r, fresh in zip(results, (True, False))]


@pytest.mark.parametrize("name", [name for name in SCRIPTS if name != "draws_unseeded"])
def test_a_script_gives_what_a_new_python_gives(tmp_path, name):
    fresh, zygote = both(tmp_path, lambda cwd: [cwd / f"{name}.py", "an argument"])
    assert zygote == fresh
    assert ZYGOTE.server is not None and ZYGOTE.server.poll() is None  # it did run in the zygote
    if name == "leaves_a_file_open":
        assert (tmp_path / "zygote" / "left_open.txt").read_text() == "flushed at exit"


def test_a_module_and_a_command_give_what_a_new_python_gives(tmp_path):
    assert both(tmp_path, lambda cwd: ["-m", "shows_itself", "an argument"])[0][2].startswith("__main__ shows_")
    for args in (["-m", "shows_itself", "x"], ["-m", "raises"], ["-c", SHOW, "x"], ["-c", "import sys; sys.exit(5)"]):
        fresh, zygote = both(tmp_path, lambda cwd: args)
        assert zygote == fresh, args


def test_unseeded_random_numbers_differ_from_job_to_job_as_between_new_processes(tmp_path):
    (tmp_path / "job.py").write_text(SCRIPTS["draws_unseeded"])  # torch's, Python's and numpy's generators
    first, second = (run_python([tmp_path / "job.py"], cwd=tmp_path) for _ in range(2))
    assert first.returncode == second.returncode == 0
    assert first.stderr != second.stderr and first.stdout.split()[0] != second.stdout.split()[0]
    assert first.stdout.split()[1] != second.stdout.split()[1]


def test_a_job_past_its_timeout_is_killed_and_raises_as_subprocess_run_does(tmp_path):
    script = tmp_path / "sleeps.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        run_python([script], timeout=3)
    assert raised.value.stdout == "started\n"
    assert run_python(["-c", "print('next')"]).stdout == "next\n"  # the zygote serves on


def test_a_job_whose_startup_settings_differ_runs_apart_and_the_next_one_in_the_zygote(tmp_path):
    zygote, probe = Zygote(python_env), ["-c", "import sys; print('torchvision' in sys.modules)"]
    try:
        assert zygote.run(probe, 60, python_env({"PYTHONPATH": str(tmp_path)}), tmp_path) is None  # run apart
        assert zygote.run(probe, 60, python_env(), tmp_path).stdout == "True\n"  # preloaded: in the zygote
    finally:
        zygote.server.stdin.close()
        zygote.server.wait()
