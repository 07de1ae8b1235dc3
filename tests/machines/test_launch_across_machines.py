"""2 machines x 2 processes, as the running guide starts them (launch with ``dist_url``, and torchrun with c10d
rendezvous): the weights of one process; machine 1 started first waits for machine 0; gloo goes through the
interface that reaches the rendezvous host, although each machine's own name resolves to loopback; a wrong
address or port ends in one line after the timeout."""
import time

import pytest

from support.compare import load_result, same_weights
from support.ddp_reference import assert_equal_to_one_process, one_process_weights
from support.processes import TINY

pytestmark = pytest.mark.slow

EARLY_SECONDS = 30  # machine 1 starts this long before machine 0, half of its 60 s timeout
JOB = ["--procs", 2, "--epochs", 2, "--plain"]


def finish(process, log, timeout=240):
    code = process.wait(timeout=timeout)
    return code, log.read_text()


@pytest.fixture(scope="module")
def launched(machines, tmp_path_factory):
    """One launch job on the module's 2 machines, machine 1 started EARLY_SECONDS before machine 0; beside it, from
    the start, one process given an address no machine has and one given a port nothing serves (5 s timeouts)."""
    root = tmp_path_factory.mktemp("launch")
    url = f"tcp://{machines[0].address}:29500"
    wrong_urls = {"port": f"tcp://{machines[1].address}:29599",
                  "address": f"tcp://{machines[0].address.rsplit('.', 1)[0]}.99:29500"}
    started = time.monotonic()
    wrong = {where: machines.python(machine, [TINY, "--procs", 1, "--machines", 2, "--machine-rank", 1, "--dist-url",
                                              wrong_urls[where], "--work-dir", root / where, "--timeout", 5],
                                    root / f"{where}.log")
             for where, machine in (("port", machines[0]), ("address", machines[1]))}

    def start(rank):
        return machines.python(machines[rank], [TINY, *JOB, "--machines", 2, "--machine-rank", rank, "--dist-url",
                                                url, "--work-dir", root / "work", "--out", root / "w.pt"],
                               root / f"machine{rank}.log")

    first = start(1)
    time.sleep(EARLY_SECONDS)
    waited = first.poll() is None
    second = start(0)
    wrong = {where: (wrong_urls[where], *finish(p, root / f"{where}.log", timeout=120), time.monotonic() - started)
             for where, p in wrong.items()}
    results = [finish(second, root / "machine0.log"), finish(first, root / "machine1.log")]
    return root, waited, results, wrong


@pytest.fixture(scope="module")
def torchrun(machines, tmp_path_factory):
    """The same job through ``torchrun --nnodes 2`` with c10d rendezvous at machine 0's host name."""
    root = tmp_path_factory.mktemp("torchrun")
    processes = [machines.python(m, ["-m", "torch.distributed.run", "--nnodes", 2, "--nproc_per_node", 2,
                                     "--rdzv_backend", "c10d", "--rdzv_endpoint", f"{machines[0].hostname}:29400",
                                     "--rdzv_id", "job", TINY, *JOB[2:], "--work-dir", root / "work",
                                     "--out", root / "w.pt"], root / f"machine{m.index}.log")
                 for m in machines]
    return root, [finish(p, root / f"machine{i}.log") for i, p in enumerate(processes)]


def test_two_machines_of_two_processes_through_launch_train_to_one_process_s_weights(launched, tmp_path):
    root, _, results, _ = launched
    assert [code for code, _ in results] == [0, 0], results
    assert_equal_to_one_process(load_result(root / "w.pt")["weights"], one_process_weights(tmp_path, ranks=4, epochs=2))


def test_machine_1_started_before_machine_0_waits_for_it_then_trains(launched):
    _, waited, results, _ = launched
    assert waited and results[1][0] == 0, results[1][1][-3000:]


def test_gloo_uses_the_interface_that_reaches_the_rendezvous_host_and_says_so(launched, machines):
    _, _, results, _ = launched
    for machine, (_, log) in zip(machines, results):
        assert (f"running 2 CPU processes with the gloo backend; gloo on eth0 ({machine.address}), which reaches "
                f"the rendezvous host {machines[0].address}") in log


def test_torchrun_on_two_machines_trains_to_the_weights_of_launch(torchrun, launched, machines):
    root, results = torchrun
    assert [code for code, _ in results] == [0, 0], [log[-3000:] for _, log in results]
    assert same_weights(load_result(root / "w.pt")["weights"], load_result(launched[0] / "w.pt")["weights"])
    # under torchrun the rendezvous host is machine 0's name, which resolves to loopback there: machine 0 takes its
    # one outward interface
    for machine, (_, log) in zip(machines, results):
        assert f"gloo on eth0 ({machine.address}), which reaches the rendezvous host" in log


@pytest.mark.parametrize("where", ["address", "port"])
def test_a_wrong_rendezvous_address_or_port_ends_in_one_line_naming_it_after_the_timeout(launched, where):
    url, code, log, seconds = launched[3][where]
    assert code == 2, log[-2000:]
    assert log.strip().splitlines()[-1].startswith(f"error: rank 1 could not join the process group at {url} (")
    assert seconds >= 5
