"""The machines the harness makes: each its own address and host name, reaching the others and nothing else, its
own name resolving to loopback as Debian's /etc/hosts makes it; killed, cut and removed on demand."""
import subprocess
import sys
import textwrap

import pytest

from support import machines as harness

pytestmark = pytest.mark.slow

PROBE = textwrap.dedent("""
    import socket, sys
    own = socket.gethostname()
    print(own, socket.gethostbyname(own), socket.gethostbyname(sys.argv[1]))
    for address in (sys.argv[2], "1.1.1.1"):
        try:
            socket.create_connection((address, 9), timeout=2).close()
            print("connected")
        except OSError as e:
            print(type(e).__name__)
""")


def run(machines, machine, code, *args):
    process = machines.run(machine, [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    return process.communicate(timeout=60)[0].split("\n")


def test_a_machine_has_its_own_name_on_loopback_and_reaches_the_other_machine_only(machines):
    other = machines[1]
    lines = run(machines, machines[0], PROBE, other.hostname, other.address)
    assert lines[0] == f"m0 127.0.1.1 {other.address}"
    assert lines[1] == "ConnectionRefusedError"  # the other machine answered: nothing listens on port 9
    assert lines[2] in ("OSError", "TimeoutError")  # no route out of the bridge


def test_killing_a_machine_ends_every_process_in_it_and_only_there(machines):
    sleepers = [machines.run(m, ["sleep", "300"]) for m in machines]
    machines.kill(machines[0])
    assert sleepers[0].wait(timeout=10) == -9
    assert sleepers[1].poll() is None and machines.pids(machines[0]) == []
    machines.kill(machines[1])


def test_a_cut_link_carries_nothing_until_it_is_restored(machines):
    reach = "import socket, sys; socket.create_connection((sys.argv[1], 9), timeout=2)"
    machines.cut(machines[0])
    try:
        cut = machines.run(machines[0], [sys.executable, "-c", reach, machines[1].address], stderr=subprocess.PIPE,
                           text=True)
        assert "TimeoutError" in cut.communicate(timeout=30)[1] or "timed out" in cut.stderr.read()
    finally:
        machines.restore(machines[0])
    again = machines.run(machines[0], [sys.executable, "-c", reach, machines[1].address], stderr=subprocess.PIPE,
                         text=True)
    assert "ConnectionRefusedError" in again.communicate(timeout=30)[1]


RECEIVE = ("import socket, time; s = socket.create_server(('', 5001)); c = s.accept()[0]; c.recv(1)\n"
           "start = time.monotonic()\nwhile c.recv(65536): pass\nprint(time.monotonic() - start)")
SEND = ("import socket, sys, time\nfor _ in range(100):\n    try:\n"
        "        s = socket.create_connection((sys.argv[1], 5001)); break\n"
        "    except OSError: time.sleep(0.1)\ns.sendall(bytes(2_000_000)); s.close()")


def test_a_limited_link_sends_at_its_rate_and_counts_what_it_sends(machines):
    machines.limit_rate(machines[0], "10mbit")
    before = machines.bytes_sent(machines[0])
    receiver = machines.run(machines[1], [sys.executable, "-c", RECEIVE], stdout=subprocess.PIPE, text=True)
    run(machines, machines[0], SEND, machines[1].address)
    seconds = float(receiver.communicate(timeout=60)[0])
    assert machines.bytes_sent(machines[0]) - before > 2_000_000
    assert seconds > 1.0  # 16 Mbit at 10 Mbit/s: 1.6 s, where the bridge alone takes milliseconds


def test_leaving_removes_every_namespace_link_and_process():
    if harness.unavailable():
        pytest.skip(harness.unavailable())
    with harness.Machines(2) as made:
        sleeper = made.run(made[1], ["sleep", "300"])
        names = [m.namespace for m in made] + [made.bridge] + [m.bridge_port for m in made]
    assert sleeper.wait(timeout=10) == -9
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout + subprocess.run(
        ["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert [name for name in names if name in listed] == []
