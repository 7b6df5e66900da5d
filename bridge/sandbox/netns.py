"""Network namespaces that stand in for pods: one IP per "pod", reachable from the host.

Why: a dynamic slurmd cannot take its own port (slurmctld always calls the global SlurmdPort), so
two slurmd on one IP collide; Ray workers likewise want a node IP of their own. A Kubernetes pod
has its own network namespace, and so does each of these: a veth pair, the host end
``10.<a>.<b>.<c>+1/30`` and the namespace end ``+2/30`` (``eth0``), a default route via the host
end, and ``ip_forward`` on, so the namespace reaches daemons on the host's addresses and the host
reaches it.

Each namespace is named ``kb-<token>`` with a random token and is deleted by that name alone.
Commands run inside with ``nsenter --net=/run/netns/<name>`` (not ``ip netns exec``, which remounts
/sys and breaks slurmd's cgroup detection).
"""

from __future__ import annotations

import ipaddress
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bridge.sandbox.processes import StackError

NETNS_DIR = Path("/run/netns")
_SUBNET = ipaddress.IPv4Network("10.213.0.0/16")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and completed.returncode != 0:
        raise StackError(f"ip {' '.join(args)} failed: {completed.stderr.strip()}")
    return completed


def _used_host_addresses() -> set[str]:
    out = _ip("-o", "-4", "addr", "show").stdout
    return {field.split("/")[0] for line in out.splitlines() for field in line.split() if "/" in field}


@dataclass(frozen=True)
class NetworkNamespace:
    """One pod-like network namespace; ``address`` is its IP, ``gateway`` the host's end."""

    name: str
    address: str
    gateway: str
    host_interface: str

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name

    def enter(self) -> list[str]:
        """The argv prefix that runs a command inside this namespace."""
        return ["nsenter", f"--net={self.path}"]

    def delete(self) -> None:
        """Remove the namespace and its veth pair (deleting either end removes both)."""
        _ip("link", "del", self.host_interface, check=False)
        _ip("netns", "del", self.name, check=False)


def _enable_forwarding() -> None:
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")


def create_namespace(*, attempts: int = 20) -> NetworkNamespace:
    """Create a namespace on a free /30 of 10.213.0.0/16 and wire it to the host."""
    _enable_forwarding()
    used = _used_host_addresses()
    subnets = list(_SUBNET.subnets(new_prefix=30))
    for _ in range(attempts):
        subnet = subnets[secrets.randbelow(len(subnets))]
        gateway, address = (str(host) for host in subnet.hosts())
        if gateway in used:
            continue
        token = secrets.token_hex(4)
        name, host_end, ns_end = f"kb-{token}", f"kbh{token}", f"kbn{token}"
        namespace = NetworkNamespace(name=name, address=address, gateway=gateway, host_interface=host_end)
        try:
            _ip("netns", "add", name)
            _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            _ip("link", "set", ns_end, "netns", name)
            _ip("addr", "add", f"{gateway}/30", "dev", host_end)
            _ip("link", "set", host_end, "up")
            inside = ["-n", name]
            _ip(*inside, "link", "set", ns_end, "name", "eth0")
            _ip(*inside, "addr", "add", f"{address}/30", "dev", "eth0")
            _ip(*inside, "link", "set", "eth0", "up")
            _ip(*inside, "link", "set", "lo", "up")
            _ip(*inside, "route", "add", "default", "via", gateway)
        except StackError:
            namespace.delete()
            raise
        return namespace
    raise StackError("no free /30 left in 10.213.0.0/16 for a network namespace")


def existing_namespaces() -> list[str]:
    """Names of this project's namespaces present now (``kb-*``), for leak checks in tests."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith("kb-")]
