"""docs/monarch.md stays true: every public name of Monarch's monarch.actor and monarch.rdma
has a row, and what a row says Danaus has (or lacks) is so."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "monarch.md").read_text()

MONARCH_ACTOR = {
    "Accumulator", "Actor", "ActorError", "ActorMesh", "Channel", "ChannelTransport",
    "Context", "Endpoint", "Extent", "Future", "HostMesh", "Instance", "MeshFailure",
    "Point", "Port", "PortReceiver", "ProcId", "ProcMesh", "Shape", "SupervisionError",
    "Uid", "ValueMesh", "as_endpoint", "attach", "attach_to_workers", "concurrent",
    "concurrent_endpoint", "config", "context", "current_actor_name", "current_rank",
    "current_size", "debug_controller", "default_bootstrap_cmd", "enable_transport",
    "endpoint", "get_meter", "get_or_spawn_controller", "hosts_from_config", "returns_future",
    "run_worker_loop_forever", "run_worker_loop_until_shutdown", "send", "shutdown_context",
    "span", "start_worker_loop_forever", "this_host", "this_proc", "traced",
    "unhandled_fault_hook",
}  # fmt: skip
"""monarch.actor's public names, and two more users meet: SupervisionError, ActorMesh."""

MONARCH_RDMA = {
    "RDMAAction", "RDMABuffer", "RDMAReadTransferWarning", "RDMATcpFallbackWarning",
    "RDMAWriteTransferWarning", "get_rdma_backend", "is_ibverbs_available", "is_rdma_available",
}  # fmt: skip


MONARCH_TOP = {
    "ActorFuture", "Extent", "Future", "NDSlice", "OpaqueRef", "RemoteProcessGroup", "Selection",
    "Shape", "Simulator", "Stream", "Tensor", "builtins", "call_on_shard_and_fetch",
    "clear_runtime_config", "coalescing", "configure", "configured", "fetch_shard",
    "function_resolvers", "get_active_mesh", "get_active_stream", "get_global_config",
    "get_runtime_config", "grad_function", "grad_generator", "inspect", "mast_reserve", "no_mesh",
    "reduce", "reduce_", "remote", "set_meta", "show", "slice_mesh", "timer", "to_mesh",
    "world_mesh",
}  # fmt: skip
"""The names of Monarch's top-level ``monarch`` module (its tensor engine's, mostly)."""

MONARCH_RANDOM = {"State", "get_state", "make_deterministic", "new_state", "set_state"}


def rows(section: str) -> list[tuple[list[str], list[str], str]]:
    """(Monarch names, Danaus names, verdict) of each row of the table under ``section``."""
    body = PAGE.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    found = []
    for line in body.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("Monarch", "---"):
            continue
        monarch, danaus, verdict = cells
        found.append(
            (re.findall(r"`([\w.]+)`", monarch), re.findall(r"`([\w.]+)`", danaus), verdict)
        )
    return found


def resolve(dotted: str) -> object:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize(
    ("section", "names", "module"),
    [
        ("`monarch.actor`", MONARCH_ACTOR, "danaus"),
        ("`monarch.rdma`", MONARCH_RDMA, "danaus.rdma"),
        ("`monarch` (the tensor engine)", MONARCH_TOP, "danaus"),
        ("`monarch.random`", MONARCH_RANDOM, "danaus.random"),
    ],
)
def test_the_table_is_true(section, names, module):
    table = rows(section)
    listed = [name for monarch, _, _ in table for name in monarch]
    assert sorted(listed) == sorted(names)
    found = importlib.import_module(module)
    public = {*found.__all__, "unhandled_fault_hook", *getattr(found, "_FROM_TENSOR", ())}
    for monarch, danaus, verdict in table:
        kind = verdict.split(":")[0].split(" (")[0]
        assert kind in ("same", "different", "not yet"), verdict
        if kind == "not yet":
            assert not danaus and not set(monarch) & public, monarch
            continue
        assert danaus, monarch
        for name in danaus:
            resolve(name)
        if kind == "same":
            assert [d.rpartition(".")[2] for d in danaus] == monarch
