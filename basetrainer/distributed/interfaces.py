"""The network interface gloo uses between machines: the one whose address reaches the rendezvous host.

Left to itself, gloo binds and announces the address that this machine's host name resolves to, and Debian's and
Ubuntu's ``/etc/hosts`` resolve it to 127.0.1.1: the other machines then connect to their own loopback and the job
fails to form ("Connection refused, remote=[127.0.x.x]"). Across machines, :func:`choose_gloo_interface` sets
``GLOO_SOCKET_IFNAME`` to the interface that holds the source address of a route to the rendezvous host (on the
rendezvous host itself, when its name resolves to loopback, the interface of the default route or else the only
other one that is up); a ``GLOO_SOCKET_IFNAME`` the user set is kept. ``launch`` and the adopted groups of
torchrun and SLURM call it before making their group, and Ray Train's workers before Ray makes theirs
(:mod:`basetrainer.integrations.ray_backend`). Replica groups started on several machines do the same towards the
lighthouse (:mod:`basetrainer.fault_tolerance`), and announce that interface's address (:func:`address_of`) for
their torchft store and Manager.
"""
import ipaddress
import os
import socket
import struct
from urllib.parse import urlparse

VARIABLE = "GLOO_SOCKET_IFNAME"
_SIOCGIFADDR = 0x8915


def choose_gloo_interface(rendezvous: str, several_machines: bool, meeting_point: str = "the rendezvous host"):
    """Sets ``GLOO_SOCKET_IFNAME`` for this process and its children when the job spans machines; the words
    saying which interface and why (for the start-up line), or None on one machine (gloo's own choice stands).
    ``rendezvous``: the rendezvous host, or a ``tcp://host:port`` URL (``meeting_point`` names it in the words)."""
    rendezvous_host = urlparse(rendezvous).hostname if "://" in rendezvous else rendezvous
    given = os.environ.get(VARIABLE)
    if given:
        return f"gloo on {given} ({VARIABLE} as given)"
    if not several_machines:
        return None
    found = interface_reaching(rendezvous_host)
    if found is None:
        return (f"gloo on the interface of this host's name: none of this machine's IPv4 interfaces reaches "
                f"{rendezvous_host}; set {VARIABLE} if the machines cannot connect")
    name, address = found
    os.environ[VARIABLE] = name
    return f"gloo on {name} ({address}), which reaches {meeting_point} {rendezvous_host}"


def address_of(interface) -> "str | None":
    """The IPv4 address of ``interface`` (a name, or None), or None where it has none."""
    return _ipv4_addresses().get(interface) if interface else None


def interface_reaching(host: str):
    """``(interface, address)``: this machine's interface whose IPv4 address is the source of a route to ``host``
    (a UDP socket's connect sends nothing); None if none is found."""
    try:
        target = socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((target, 9))
            source = probe.getsockname()[0]
    except OSError:
        return None
    addresses = _ipv4_addresses()
    if ipaddress.ip_address(source).is_loopback:  # this machine is the host, under a name resolving to loopback
        outward = [name for name in addresses if not ipaddress.ip_address(addresses[name]).is_loopback]
        default = _default_route_interface()
        name = default if default in outward else (outward[0] if len(outward) == 1 else None)
        return (name, addresses[name]) if name else None
    return next(((name, address) for name, address in addresses.items() if address == source), None)


def _ipv4_addresses() -> dict:
    """{interface: its IPv4 address} of the interfaces that have one (Linux's SIOCGIFADDR)."""
    import fcntl  # Linux's (and other Unix's) only

    found = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
            except OSError:  # no IPv4 address, or down
                continue
            found[name] = socket.inet_ntoa(answer[20:24])
    return found


def _default_route_interface():
    try:
        with open("/proc/net/route", encoding="ascii") as routes:
            rows = [line.split() for line in routes.readlines()[1:]]
    except OSError:
        return None
    return next((row[0] for row in rows if len(row) > 1 and row[1] == "00000000"), None)
