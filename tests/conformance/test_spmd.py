"""danaus.spmd: torchrun's view of a mesh (ranks, local ranks, nodes) on every transport."""

from __future__ import annotations

import pytest

from danaus import ActorError, hosts, this_host
from danaus.spmd import SPMDActor, setup_torch_elastic_env


def envs(actors) -> list[dict[str, str]]:
    return list(actors.torch_env.call("master", 1234).get().values())


def picked(env: dict[str, str]) -> tuple[int, ...]:
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
    return tuple(int(env[k]) for k in (*keys, "GROUP_WORLD_SIZE"))


def test_one_host(run):
    def main():
        return envs(this_host().spawn_procs({"gpus": 4}).spawn("spmd", SPMDActor))

    got = run(main)
    assert [picked(env) for env in got] == [(r, 4, r, 4, 0, 1) for r in range(4)]
    assert {env["MASTER_ADDR"] for env in got} == {"master"}
    assert {env["MASTER_PORT"] for env in got} == {"1234"}
    assert {env["ROLE_RANK"] for env in got} == {"0", "1", "2", "3"}
    assert all("OMP_NUM_THREADS" in env for env in got)
    assert len({env["TORCHELASTIC_RUN_ID"] for env in got}) == 1


def test_a_slice_counts_from_zero(run):
    def main():
        procs = this_host().spawn_procs({"gpus": 4})
        return envs(procs.slice(gpus=slice(1, 3)).spawn("spmd", SPMDActor))

    assert [picked(env) for env in run(main)] == [(0, 2, 0, 2, 0, 1), (1, 2, 1, 2, 0, 1)]


def test_several_hosts_are_torchruns_nodes():
    import danaus.sim

    def main():
        return envs(hosts().spawn_procs({"gpus": 2}).spawn("spmd", SPMDActor))

    got = danaus.sim.run(main, hosts=3).value
    assert [picked(env) for env in got] == [
        (rank, 6, rank % 2, 2, rank // 2, 3) for rank in range(6)
    ]


def test_setup_needs_procs_of_their_own_on_the_simulator():
    import danaus.sim

    def main():
        procs = this_host().spawn_procs({"gpus": 2})
        with pytest.raises(RuntimeError, match="processes of their own"):
            setup_torch_elastic_env(procs)
        actors = procs.spawn("spmd", SPMDActor)
        with pytest.raises(ActorError, match="share the controller's process"):
            actors.setup_env.call("master", 1).get()
        return True

    assert danaus.sim.run(main).value


def test_master_address_and_port_go_together(run):
    def main():
        with pytest.raises(ValueError, match="both"):
            setup_torch_elastic_env(this_host().spawn_procs(), master_addr="h")
        return True

    assert run(main)
