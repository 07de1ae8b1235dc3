"""Several machines on this one: each a network namespace with its own address, on a private bridge.

:class:`Machines` makes ``n`` of them and owns everything it made: the namespaces (``bt<pid>n<k>m<i>``: the
process id, the harness's number in it, the machine's), the bridge (``btb<pid>n<k>``) and the veth pairs that join
them, each machine's ``/etc/netns/<name>/hosts``, and every process started in them. It removes all of it on leaving
its ``with`` block, at the interpreter's exit, on SIGTERM (an interruption, as Ctrl-C) and when it is collected; a
run that died without cleaning up (SIGKILL) is cleaned up by the next one, which removes the things of any process
id that no longer runs.

The bridge has no address and no uplink, and each namespace only the route to the harness's /24: a process in a
machine can reach the other machines and nothing else. Each machine is named ``m<i>`` (its own UTS host name) and
resolves its own name to 127.0.1.1, as Debian's and Ubuntu's ``/etc/hosts`` do, and the others' names to their
addresses; so gloo, left to itself, announces a loopback address, as it does between real machines.

Needs root and ``ip``/``tc``: :func:`unavailable` says why not, for a test to skip with.
"""
import atexit
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import weakref

from . import TESTS

SUBNET = "10.231.{}.0/24"  # the /24 of one harness (its third number from the process id); nothing else is in it
_NETNS_ETC = "/etc/netns"
_OWN = re.compile(r"^bt[bvp]?(\d+)n\d+(?:m\d+)?$")
_LIVE = weakref.WeakSet()
_COUNT = itertools.count()


def unavailable():
    """Why machines cannot be made here (a line for ``pytest.skip``), or None when they can."""
    if os.geteuid() != 0:
        return "several machines need root (network namespaces)"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"several machines need the {tool!r} command"
    probe = f"bt{os.getpid()}probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"'ip netns add' fails here: {made.stderr.strip()}"
    _ip("netns", "delete", probe, check=False)
    return None


class Machine:
    """One machine: its index, namespace, address, host name and the name of its link's end on the bridge."""

    def __init__(self, index, namespace, address, bridge_port):
        self.index, self.namespace, self.address, self.bridge_port = index, namespace, address, bridge_port
        self.hostname = f"m{index}"

    def __repr__(self):
        return f"Machine({self.hostname}, {self.address})"


class Machines:
    """``n`` machines: ``with Machines(2) as machines: machines.run(machines[0], [...])``."""

    def __init__(self, n):
        remove_stale()
        self._tag = tag = f"{os.getpid()}n{next(_COUNT)}"
        self.bridge, self.interface = f"btb{tag}", "eth0"
        self.subnet = SUBNET.format(os.getpid() % 250 + 1)
        prefix = self.subnet.rsplit(".", 1)[0]
        self.machines = [Machine(i, f"bt{tag}m{i}", f"{prefix}.{i + 1}", f"btv{tag}m{i}") for i in range(n)]
        self._processes = []
        self._finalizer = weakref.finalize(self, _remove, self.bridge, [m.namespace for m in self.machines],
                                           [m.bridge_port for m in self.machines], self._processes)
        _LIVE.add(self)
        _handle_sigterm()
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    def __getitem__(self, index) -> Machine:
        return self.machines[index]

    def __len__(self):
        return len(self.machines)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Kills every process in the machines and removes the namespaces, links and files (once)."""
        self._finalizer()

    def _make(self):
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        hosts = "".join(f"{m.address} {m.hostname}\n" for m in self.machines)
        for m in self.machines:
            _ip("netns", "add", m.namespace)
            inner = f"btp{self._tag}m{m.index}"
            _ip("link", "add", m.bridge_port, "type", "veth", "peer", "name", inner, "netns", m.namespace)
            _ip("link", "set", m.bridge_port, "master", self.bridge, "up")
            _ip("-n", m.namespace, "link", "set", inner, "name", self.interface)
            _ip("-n", m.namespace, "addr", "add", f"{m.address}/24", "dev", self.interface)
            _ip("-n", m.namespace, "link", "set", self.interface, "up")
            _ip("-n", m.namespace, "link", "set", "lo", "up")
            etc = os.path.join(_NETNS_ETC, m.namespace)
            os.makedirs(etc, exist_ok=True)
            with open(os.path.join(etc, "hosts"), "w") as f:  # Debian's: this machine's own name is loopback
                f.write(f"127.0.0.1 localhost\n127.0.1.1 {m.hostname}\n"
                        + "".join(line for line in hosts.splitlines(True) if not line.endswith(f" {m.hostname}\n")))

    def run(self, machine, argv, env=None, **popen_kwargs) -> subprocess.Popen:
        """Starts ``argv`` on ``machine`` (in its namespace, under its host name); the Popen."""
        argv = [str(a) for a in argv]
        command = ["ip", "netns", "exec", machine.namespace, "unshare", "--uts", "sh", "-c",
                   'hostname "$0" && exec "$@"', machine.hostname, *argv]
        process = subprocess.Popen(command, env=env, start_new_session=True, **popen_kwargs)
        process.machine = machine
        self._processes.append(process)
        return process

    def python(self, machine, args, log, env=None, cwd=TESTS) -> subprocess.Popen:
        """Starts ``python args...`` on ``machine`` as :func:`support.processes.run_python` would (this Python, one
        thread, in tests/ unless ``cwd`` says otherwise), its output going to the file ``log``."""
        from .processes import python_env  # here: the zygote that module starts is of no use in a namespace

        with open(log, "w") as output:
            return self.run(machine, [sys.executable, *args], env=python_env(env), cwd=cwd, stdout=output,
                            stderr=subprocess.STDOUT)

    def lighthouse(self, machine, port, log) -> subprocess.Popen:
        """torchft's lighthouse on ``machine``, on ``port`` of all its addresses, started as the fault-tolerance guide
        starts it (a quorum of 1, 30 s to join, 1 s heartbeats), its output going to the file ``log``."""
        with open(log, "w") as output:
            return self.run(machine, ["torchft_lighthouse", "--min_replicas", 1, "--join_timeout_ms", 30000,
                                      "--heartbeat_timeout_ms", 1000, "--bind", f"[::]:{port}"],
                            stdout=output, stderr=subprocess.STDOUT)

    def pids(self, machine):
        """The process ids running in ``machine``."""
        out = _ip("netns", "pids", machine.namespace, check=False).stdout
        return [int(p) for p in out.split()]

    def kill(self, machine):
        """Kills every process in ``machine`` at once (SIGKILL), as a machine that loses its power."""
        for process in self._processes:  # its process group too: one just started may not have entered the namespace
            if process.machine is machine and process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        _kill_namespace(machine.namespace)

    def cut(self, machine):
        """Pulls ``machine``'s cable: its port on the bridge goes down (its own interface keeps its address)."""
        _ip("link", "set", machine.bridge_port, "down")

    def restore(self, machine):
        """Plugs the cable back in; the machines forget the failed address lookups of while it was out."""
        _ip("link", "set", machine.bridge_port, "up")
        for m in self.machines:
            _ip("-n", m.namespace, "neigh", "flush", "dev", self.interface, check=False)

    def limit_rate(self, machine, rate):
        """Limits what ``machine`` sends to ``rate`` (tc's units: ``"1gbit"``, ``"100mbit"``), with tc's tbf."""
        bits = _bits_per_second(rate)
        burst = max(bits // 8 // 100, 16 * 1024)  # 10 ms of traffic, at least 16 KiB
        _tc("-n", machine.namespace, "qdisc", "replace", "dev", self.interface, "root", "tbf", "rate", rate,
            "burst", str(burst), "latency", "100ms")

    def bytes_sent(self, machine) -> int:
        """The bytes ``machine``'s interface has sent, from its namespace's own counters."""
        out = _ip("-n", machine.namespace, "-j", "-s", "link", "show", "dev", self.interface).stdout
        return int(json.loads(out)[0]["stats64"]["tx"]["bytes"])


def _bits_per_second(rate: str) -> int:
    number, unit = re.fullmatch(r"([\d.]+)\s*([kmg]?)bit", rate.lower()).groups()
    return int(float(number) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[unit])


def remove_stale():
    """Removes the namespaces, links and files of harnesses whose process no longer runs."""
    namespaces = _ip("netns", "list", check=False).stdout.split("\n")
    links = re.findall(r"^\d+: ([^:@]+)", _ip("-o", "link", "show", check=False).stdout, re.M)
    names = [line.split()[0] for line in namespaces if line.strip()] + links
    if os.path.isdir(_NETNS_ETC):
        names += os.listdir(_NETNS_ETC)
    for name in set(names):
        match = _OWN.match(name)
        if match and not _running(int(match.group(1))):
            _kill_namespace(name)
            _ip("netns", "delete", name, check=False)
            _ip("link", "delete", name, check=False)
            shutil.rmtree(os.path.join(_NETNS_ETC, name), ignore_errors=True)


def _running(pid) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(bridge, namespaces, ports, processes):
    for name in namespaces:
        _kill_namespace(name)
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait()
    for port in ports:
        _ip("link", "delete", port, check=False)  # and its pair in the namespace
    for name in namespaces:
        _ip("netns", "delete", name, check=False)
        shutil.rmtree(os.path.join(_NETNS_ETC, name), ignore_errors=True)
    _ip("link", "delete", bridge, check=False)
    if os.path.isdir(_NETNS_ETC) and not os.listdir(_NETNS_ETC):
        os.rmdir(_NETNS_ETC)


def _kill_namespace(name):
    """SIGKILLs every process in namespace ``name`` until none is left (a dying one may have started others)."""
    for _ in range(50):
        pids = [int(p) for p in _ip("netns", "pids", name, check=False).stdout.split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _handle_sigterm():
    """A SIGTERM (a CI job cancelled, pytest-timeout) is an interruption, as Ctrl-C's: pytest stops and tears down,
    a script unwinds, and the exit handlers remove the machines, instead of the process dying with them in place."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt_on_sigterm)


def _interrupt_on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


@atexit.register
def _close_all():
    for machines in list(_LIVE):
        machines.close()


def _ip(*args, check=True):
    return _command("ip", *args, check=check)


def _tc(*args, check=True):
    return _command("tc", *args, check=check)


def _command(*argv, check=True):
    result = subprocess.run(argv, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result

