"""The system actors as the rest of the job reaches them: their keys, their endpoints, and
meshes of them to message.

Every proc hosts a `ProcAgent` under the key `PROC_AGENT`; the proc of each
host's agent hosts a `HostAgent` under `HOST_AGENT` as well. Code anywhere
addresses them through the functions here, never through the agents' module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from danaus.core.actor import Actor, endpoints_of
from danaus.core.actor_mesh import ActorMesh
from danaus.core.agents import HostAgent, ProcAgent
from danaus.core.placement import Placement
from danaus.core.shape import Shape

if TYPE_CHECKING:
    from danaus.core.runtime import Runtime

PROC_AGENT = "agent"
HOST_AGENT = "host"
PROC_AGENT_ENDPOINTS = endpoints_of(ProcAgent)
HOST_AGENT_ENDPOINTS = endpoints_of(HostAgent)


def agent_of(proc: str) -> ActorMesh[Any]:
    """The agent of one proc, as a mesh of one."""
    return ActorMesh(PROC_AGENT, "agents", PROC_AGENT_ENDPOINTS, (proc,), Shape.unity())


def proc_agents(at: Placement) -> ActorMesh[Any]:
    """The agents of the procs of ``at``'s members, shaped like them."""
    return ActorMesh(PROC_AGENT, "agents", PROC_AGENT_ENDPOINTS, at.members(), at.shape)


def host_agents(at: Placement) -> ActorMesh[Any]:
    """The agents of the hosts ``at`` places (a host mesh's members), shaped like them."""
    return ActorMesh(HOST_AGENT, "hosts", HOST_AGENT_ENDPOINTS, at.procs, at.shape)


def system_actors(runtime: Runtime, host_agent: bool) -> dict[str, Actor]:
    """The agents a proc hosts, by key: its own, and its host's if it is the host's agent."""
    agents: dict[str, Actor] = {PROC_AGENT: ProcAgent(runtime)}
    if host_agent:
        agents[HOST_AGENT] = HostAgent(runtime, agent_of)
    return agents
