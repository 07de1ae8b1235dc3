"""A Python that has imported torch once and forks a child for each job a test runs.

Nearly every job a test starts (``python tiny.py ...``, the example, a worker) spends 3 to 5 s of
the machine's 2 cores importing torch, torch._dynamo (which building any optimizer imports) and
torchvision before it does a second of work: with about 200 jobs, most of the suite's time. The
server (:func:`serve`) imports :data:`PRELOADED` once; :class:`Zygote`, in the test process, sends
it each job, and it forks a child that runs the job as ``python ARGS`` would:

- its own process (its own pid, the exit code Python gives: ``sys.exit``, an uncaught exception
  with its traceback, death by a signal), started and waited for as ``subprocess.run`` would;
- its arguments (``script.py``, ``-m module`` or ``-c code``) in ``sys.argv``, its directory first
  on ``sys.path``, the code run as ``__main__`` (so ``launch`` works, and re-imports it in workers);
- its environment and working directory, stdin from /dev/null, stdout and stderr to files;
- random state as a new process has it (torch, numpy and ``random`` seeded anew).

What is not as in a new Python: the modules of :data:`PRELOADED` are already imported (a test of
what a job imports asks ``run_python(..., fresh=True)``), warnings their imports gave are not given
again, and the child ends as launch's workers end (threads joined, atexit handlers, the script's
objects dropped and collected, streams flushed, then ``os._exit``), without clearing other modules. A job whose interpreter
settings differ from the server's (``PYTHON*``, ``OMP_*``, ``TORCH*``... in its environment) runs
as a new Python instead.
"""
import atexit
import builtins
import gc
import importlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types

PRELOADED = ("torch", "torch._dynamo", "torchvision", "basetrainer.tasks.classification", "basetrainer.cli")
# Environment variables that Python or a preloaded library reads when it starts: a job that sets
# them otherwise than the server had them needs a Python of its own.
STARTUP_VARIABLES = ("PYTHON", "OMP_", "MKL_", "KMP_", "TORCH", "PYTORCH", "LD_", "MALLOC")


# -- the server --------------------------------------------------------------------------------------

def serve():
    """Reads jobs from stdin and answers each with the child's pid, then its exit code, on stdout."""
    replies, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nothing an import prints may reach the replies
    os.close(devnull)
    for name in PRELOADED:
        importlib.import_module(name)
    while (job := _receive(0)) is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(replies)
            _run(*job)
        _send(replies, pid)
        _send(replies, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))


def _run(args, env, cwd, stdout, stderr):
    """In the child: becomes ``python *args`` run in ``cwd`` with ``env``; never returns."""
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, stdout, os.O_WRONLY), (2, stderr, os.O_WRONLY)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    _seed_as_a_new_process()
    code, killed_by = 0, None
    try:
        _run_main(list(args))
    except SystemExit as end:
        code = _exit_code(end)
    except BaseException as error:  # noqa: B902 - Python prints any uncaught error and exits 1
        trace = error.__traceback__
        while trace is not None and trace.tb_frame.f_code.co_filename == _run_main.__code__.co_filename:
            trace = trace.tb_next  # the traceback from the job's first frame, as Python prints it
        sys.excepthook(type(error), error.with_traceback(trace), trace)
        code, killed_by = 1, signal.SIGINT if isinstance(error, KeyboardInterrupt) else None  # as Python does
    _exit(code, killed_by)


def _seed_as_a_new_process():
    """torch seeds its default generator when it starts (from the system's entropy; older versions with
    a fixed seed), numpy from the system's entropy; ``random`` reseeds itself after a fork."""
    import numpy
    import torch
    if torch.initial_seed() == torch.Generator().initial_seed():  # a fixed seed
        torch.default_generator.set_state(torch.Generator().get_state())
    else:
        torch.seed()
    numpy.random.seed()


def _run_main(args):
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    if args[0] == "-c":
        sys.argv, sys.path[0] = ["-c", *args[2:]], ""
        exec(compile(args[1], "<string>", "exec"), main.__dict__)
    elif args[0] == "-m":
        import runpy
        sys.argv, sys.path[0] = args[1:], os.getcwd()
        runpy._run_module_as_main(args[1])  # what ``python -m`` runs
    else:
        path = os.path.abspath(args[0])
        sys.argv, sys.path[0] = args, os.path.dirname(os.path.realpath(path))
        main.__file__, main.__cached__, main.__spec__ = path, None, None
        with open(path, "rb") as source:
            code = compile(source.read(), path, "exec")
        exec(code, main.__dict__)


def _exit_code(end: SystemExit) -> int:
    if end.code is None or isinstance(end.code, int):
        return end.code or 0
    print(end.code, file=sys.stderr)
    return 1


def _exit(code, killed_by=None):
    threading._shutdown()  # what the interpreter does when it exits, in its order
    atexit._run_exitfuncs()
    sys.modules["__main__"].__dict__.clear()  # the script's objects go (its open files are flushed and closed)
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if killed_by is not None:
        signal.signal(killed_by, signal.SIG_DFL)
        os.kill(os.getpid(), killed_by)
    os._exit(code & 0xFF)


# -- the messages --------------------------------------------------------------------------------------

def _send(fd, value):
    data = pickle.dumps(value)
    data = struct.pack("<Q", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def _receive(fd, deadline=None):
    """The next value on ``fd``; None at its end; TimeoutError past ``deadline`` (``time.monotonic``)."""
    size = _read(fd, 8, deadline)
    return None if size is None else pickle.loads(_read(fd, struct.unpack("<Q", size)[0], deadline))


def _read(fd, size, deadline):
    data = b""
    while len(data) < size:
        if deadline is not None and not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise TimeoutError
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


# -- the client ----------------------------------------------------------------------------------------

class Zygote:
    """The test process's side: starts the server at the first job and runs jobs through it."""

    def __init__(self, environment):
        """``environment()``: the environment to start the server in (jobs whose startup settings differ run apart)."""
        self.environment, self.server, self.env, self.busy = environment, None, None, threading.Lock()

    def run(self, args, timeout, env, cwd):
        """``python *args`` in a child of the server, as ``subprocess.run(..., capture_output=True, text=True)``
        returns it; None when the job needs a Python of its own (or the server is busy or gone)."""
        if not self._can_serve(args, env) or not self.busy.acquire(blocking=False):
            return None
        try:
            return self._run(args, timeout, env, cwd)
        finally:
            self.busy.release()

    def _can_serve(self, args, env):
        if not (args[0] in ("-c", "-m") or args[0].endswith(".py")):
            return False
        if self.server is None or self.server.poll() is not None:
            self.env = self.environment()
            self.server = subprocess.Popen([sys.executable, "-c", "from support.zygote import serve; serve()"],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                           env=self.env, cwd=os.path.dirname(os.path.dirname(__file__)))
        return all(env.get(name) == self.env.get(name) for name in {*env, *self.env}
                   if name.startswith(STARTUP_VARIABLES))

    def _run(self, args, timeout, env, cwd):
        command = [sys.executable, *args]
        with tempfile.TemporaryDirectory(prefix="job-") as tmp:
            stdout, stderr = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
            for path in (stdout, stderr):
                open(path, "w").close()
            deadline = None if timeout is None else time.monotonic() + timeout
            _send(self.server.stdin.fileno(), (args, env, str(cwd), stdout, stderr))
            pid = _receive(self.server.stdout.fileno())
            if pid is None:
                return None
            try:
                code = _receive(self.server.stdout.fileno(), deadline)
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                _receive(self.server.stdout.fileno())
                raise subprocess.TimeoutExpired(command, timeout, _text(stdout), _text(stderr)) from None
            if code is None:
                raise RuntimeError(f"the test zygote ended while it ran {command}")
            return subprocess.CompletedProcess(command, code, _text(stdout), _text(stderr))


def _text(path):
    with open(path, errors="replace") as file:  # as subprocess's text mode: the locale's encoding, any newline
        return file.read()
