"""Which interface a node's processes use, decided inside real network namespaces (fast: no training).

These run in the default test run (not marked ``multinode``): each asks ``fabric_core._distributed.network`` and
``fabric_core._run.command.elastic_network_options`` from a Python process entered into a node, and compares the answer
with the veth pair the fixture made.
"""

from __future__ import annotations

import json
import sys

import pytest

PROBE = """
import json, sys
from fabric_core._distributed import network
from fabric_core._run.command import elastic_network_options
from fabric_core.errors import InvalidConfigError

main, environ = sys.argv[1], json.loads(sys.argv[2])
out = {"loopback_name": network.hostname_is_loopback(), "local_main": network.is_local_address(main)}
try:
    choice = network.choose_interface(main, environ)
    out["choice"] = None if choice is None else [choice.interface, choice.local_address, list(choice.variables)]
except InvalidConfigError as error:
    out["error"] = [error.argument, str(error)]
try:
    out["elastic"] = elastic_network_options([f"--rdzv-endpoint={main}:29500", "--rdzv-id=j"], 2)
except InvalidConfigError as error:
    out["elastic"] = str(error)
print("PROBE" + json.dumps(out))
"""


def probe(node, main: str, **environ: str) -> dict:
    job = node.run([sys.executable, "-c", PROBE, main, json.dumps(environ)], deadline=60)
    assert job.returncode == 0, job.output
    line = next(line for line in job.output.splitlines() if line.startswith("PROBE"))
    return json.loads(line[len("PROBE") :])


def test_where_the_host_name_is_loopback_the_interface_routing_to_the_main_address_is_chosen(two_nodes) -> None:
    node0, node1 = two_nodes.nodes
    variables = ["GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"]
    on_node1 = probe(node1, node0.address)
    assert on_node1["loopback_name"] is True and on_node1["local_main"] is False
    assert on_node1["choice"] == [node1.interface, node1.address, variables]
    # The elastic rendezvous: node 1 gives its routable address, and does not host the store.
    assert on_node1["elastic"][-1] == f"--local-addr={node1.address}"
    assert not any("is_host" in option for option in on_node1["elastic"])

    on_node0 = probe(node0, node0.address)  # node 0 reaching its own address: its veth, not lo
    assert on_node0["choice"] == [node0.interface, node0.address, variables]
    assert on_node0["local_main"] is True
    assert "--rdzv-conf=is_host=1" in on_node0["elastic"]
    assert on_node0["elastic"][-1] == f"--local-addr={node0.address}"


def test_a_variable_the_user_set_wins_and_a_loopback_main_address_needs_nothing(two_nodes) -> None:
    node0, node1 = two_nodes.nodes
    assert probe(node1, node0.address, GLOO_SOCKET_IFNAME="eth7")["choice"] == [
        node1.interface,
        node1.address,
        ["NCCL_SOCKET_IFNAME"],
    ]
    assert probe(node1, node0.address, GLOO_SOCKET_IFNAME="a", NCCL_SOCKET_IFNAME="b")["choice"] is None
    on_loopback = probe(node1, "127.0.0.1")
    assert on_loopback["choice"] is None
    assert on_loopback["elastic"] == ["--rdzv-endpoint=127.0.0.1:29500", "--rdzv-id=j"]


def test_an_unreachable_main_address_fails_at_once_naming_the_variable_to_set(two_nodes) -> None:
    result = probe(two_nodes.nodes[1], "10.99.0.1")  # no route: the nodes have only their /24
    argument, message = result["error"]
    assert argument == "GLOO_SOCKET_IFNAME"
    assert "Set GLOO_SOCKET_IFNAME" in message and "10.99.0.1" in message and "no route" in message
    assert "no route to 10.99.0.1" in result["elastic"]


@pytest.mark.parametrize("two_nodes", [{"hosts": "own"}], indirect=True)
def test_where_the_host_name_resolves_to_the_node_itself_nothing_is_changed(two_nodes) -> None:
    node0, node1 = two_nodes.nodes
    result = probe(node1, node0.address)
    assert result["loopback_name"] is False
    assert result["choice"] is None
    assert result["elastic"] == [f"--rdzv-endpoint={node0.address}:29500", "--rdzv-id=j"]
