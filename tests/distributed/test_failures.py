"""How a failed job reads in its launcher when the failure came from another machine."""
import datetime

from basetrainer.distributed import failures

READ_ERROR = ("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error [10.0.0.2]:23726: "
              "Connection reset by peer. This is typically caused by a remote worker hanging ...")


def test_a_peer_on_another_machine_gone_mid_collective_is_one_line_naming_it_with_the_requeue_exit_code():
    reports = [(1.0, 0, "RuntimeError", READ_ERROR, "Traceback ..."), (1.1, 1, "RuntimeError", READ_ERROR, "...")]
    error = failures.worker_error(0, [], still_running=[], reports=reports, first_rank=0,
                                  timeout=datetime.timedelta(seconds=60))
    assert isinstance(error, failures.MachineLost) and error.exit_code == 75
    assert str(error) == ("rank 0: the machine at 10.0.0.2 went away (its connection reset by peer in a collective); "
                          "rerun with resume: auto to go on from the last checkpoint")


def test_a_collective_timed_out_on_a_peer_of_another_machine_names_that_machine():
    message = "[pair.cc:598] Timed out waiting 5000ms for recv operation to complete from [10.0.0.2]:41234"
    error = failures.worker_error(0, [], still_running=[], reports=[(1.0, 0, "RuntimeError", message, "")],
                                  first_rank=0, timeout=datetime.timedelta(seconds=5))
    assert str(error) == ("rank 0: a collective timed out after 5s: the machine at 10.0.0.2 stopped responding; "
                          "raise dist_timeout if they are only slow")
