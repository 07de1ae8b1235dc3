"""The interface gloo uses across machines: the one that reaches the rendezvous host; a user's GLOO_SOCKET_IFNAME kept.
(Between real machines, in network namespaces: tests/machines/test_launch_across_machines.py.)"""
import pytest

from basetrainer.distributed import interfaces


def test_a_user_s_gloo_socket_ifname_is_kept_and_said(monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "ib0")
    assert interfaces.choose_gloo_interface("tcp://10.0.0.1:29500", True) == "gloo on ib0 (GLOO_SOCKET_IFNAME as given)"
    assert interfaces.os.environ["GLOO_SOCKET_IFNAME"] == "ib0"


def test_on_one_machine_gloo_keeps_its_own_choice(monkeypatch):
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    assert interfaces.choose_gloo_interface("tcp://127.0.0.1:29500", False) is None
    assert "GLOO_SOCKET_IFNAME" not in interfaces.os.environ


def test_the_interface_reaching_an_address_of_this_machine_is_the_one_that_holds_it():
    outward = {name: address for name, address in interfaces._ipv4_addresses().items() if not address.startswith("127.")}
    if not outward:
        pytest.skip("this machine has no IPv4 interface but loopback")
    name, address = next(iter(outward.items()))
    assert interfaces.interface_reaching(address) == (name, address)


def test_an_unresolvable_rendezvous_host_leaves_gloo_its_own_choice_and_says_to_set_the_variable(monkeypatch):
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    words = interfaces.choose_gloo_interface("tcp://no-such-host.invalid:29500", True)
    assert "none of this machine's IPv4 interfaces reaches no-such-host.invalid; set GLOO_SOCKET_IFNAME" in words
    assert "GLOO_SOCKET_IFNAME" not in interfaces.os.environ
