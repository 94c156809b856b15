"""Which network interface the processes of a job talk through, where the host name would give a wrong one.

gloo advertises the address this machine's host name resolves to. Where that is a loopback address (Debian's
``/etc/hosts`` maps the host name to 127.0.1.1, many containers to 127.0.0.1) the other nodes are told to
connect to themselves: their connections are refused, and the job cannot start. torch's elastic rendezvous
decides whether this node hosts its store by the same host name, and so does not recognise its own address.

When neither ``GLOO_SOCKET_IFNAME`` nor ``NCCL_SOCKET_IFNAME`` is set, the host name resolves to loopback only
and the main address is not a loopback one, :func:`choose_interface` picks the interface the kernel routes the
main address through (a UDP ``connect``, which sends nothing, then the interface that holds the local address
it chose). Torch-free: the launcher uses it too.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from fabric_core.errors import InvalidConfigError

__all__ = [
    "SOCKET_VARIABLES",
    "InterfaceChoice",
    "choose_interface",
    "hostname_is_loopback",
    "interface_with",
    "is_local_address",
    "is_loopback",
    "resolved",
    "route_source",
]

#: The variables that name the interface gloo and NCCL use; a set one always wins.
SOCKET_VARIABLES: Final = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
_SIOCGIFADDR: Final = 0x8915


@dataclass(frozen=True)
class InterfaceChoice:
    """The interface chosen for a job whose host name resolves to loopback."""

    interface: str
    local_address: str
    main_address: str
    hostname: str
    variables: tuple[str, ...]

    def describe(self) -> str:
        """One line for the log: what was chosen, why, and how to choose otherwise."""
        setting = " and ".join(f"{name}={self.interface}" for name in self.variables)
        return (
            f"fabric-core: the host name {self.hostname!r} resolves to a loopback address, which other machines "
            f"cannot reach; connecting through interface {self.interface} ({self.local_address}), which routes to "
            f"the main address {self.main_address}. Set {' / '.join(SOCKET_VARIABLES)} to choose another "
            f"(chosen: {setting})."
        )


def resolved(host: str) -> list[str]:
    """The addresses ``host`` resolves to (an address resolves to itself); none where it does not resolve."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]).split("%", 1)[0] for info in infos))


def is_loopback(address: str) -> bool:
    """Whether ``address`` is a loopback IP address (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def hostname_is_loopback(hostname: str | None = None) -> bool:
    """Whether the host name (this machine's by default) resolves to loopback addresses only, or to none."""
    addresses = resolved(hostname or socket.gethostname())
    return all(is_loopback(address) for address in addresses)


def route_source(address: str) -> str:
    """The local address the kernel would send from to reach ``address`` (an IP address).

    Raises:
        OSError: No route to ``address`` (``Network is unreachable``).
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((address, 9))  # UDP: picks the route and the source address, sends nothing
        return str(probe.getsockname()[0]).split("%", 1)[0]


def interface_with(address: str) -> str | None:
    """The name of the network interface that holds ``address``, or ``None``."""
    wanted = ipaddress.ip_address(address)
    if wanted.version == 6:
        return _ipv6_interface(wanted)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                reply = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address on this interface
                continue
            if socket.inet_ntoa(reply[20:24]) == str(wanted):
                return name
    return None


def _ipv6_interface(wanted: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    try:
        with open("/proc/net/if_inet6") as table:
            for line in table:
                fields = line.split()
                if len(fields) >= 6 and ipaddress.ip_address(int(fields[0], 16)) == wanted:
                    return fields[5]
    except OSError:
        pass
    return None


def is_local_address(host: str) -> bool:
    """Whether ``host`` (an address or a name) is an address of this machine: something here can bind to it."""
    for address in resolved(host):
        if is_loopback(address):
            return True
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            try:
                sock.bind((address, 0))
            except OSError:
                continue
            return True
    return False


def choose_interface(main_address: str, environ: Mapping[str, str] | None = None) -> InterfaceChoice | None:
    """The interface to reach ``main_address`` through, where the host name would give a loopback one.

    Args:
        main_address: Where rank 0 (or the rendezvous) listens: an IP address or a host name.
        environ: The environment (default ``os.environ``); a set ``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME``
            is left as it is.

    Returns:
        ``None`` when nothing needs choosing: both variables are set, the main address is a loopback one (one
        machine), or the host name resolves to an address other machines can reach. Else the choice, with the
        variables it is for (the ones not set).

    Raises:
        InvalidConfigError: The host name resolves to loopback and no interface routes to ``main_address``,
            naming the variable to set.
    """
    environ = os.environ if environ is None else environ
    unset = tuple(name for name in SOCKET_VARIABLES if not environ.get(name, "").strip())
    if not unset:
        return None
    targets = resolved(main_address)
    if not targets or all(is_loopback(address) for address in targets):
        return None
    hostname = socket.gethostname()
    if not hostname_is_loopback(hostname):
        return None
    target = targets[0]
    try:
        local = route_source(target)
        interface = interface_with(local)
    except OSError as error:
        raise _no_interface(hostname, main_address, f"no route to it ({error.strerror or error})") from None
    if interface is None:
        raise _no_interface(hostname, main_address, f"no interface here holds {local}, the address routed from")
    return InterfaceChoice(interface, local, main_address, hostname, unset)


def _no_interface(hostname: str, main_address: str, why: str) -> InvalidConfigError:
    return InvalidConfigError(
        f"The host name {hostname!r} resolves to a loopback address, which other machines cannot reach, and no "
        f"network interface could be chosen to reach the main address {main_address} instead: {why}. Set "
        "GLOO_SOCKET_IFNAME (NCCL_SOCKET_IFNAME on GPUs) to the interface that reaches the other machines (`ip "
        "addr` lists them), check the main address, or map the host name to a reachable address in /etc/hosts.",
        argument="GLOO_SOCKET_IFNAME",
        value=main_address,
    )
