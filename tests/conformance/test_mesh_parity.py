"""Mesh sizes over several dimensions, host mesh shutdown, futures in asyncio, ranked receivers."""

from __future__ import annotations

import asyncio
import pickle

import pytest

from danaus import Actor, Channel, Port, context, current_rank, endpoint, this_host


class Echo(Actor):
    @endpoint
    def rank(self) -> int:
        return current_rank().rank

    @endpoint
    def spawn_rank(self) -> int:
        return context().actor_instance.rank.rank

    @endpoint
    def report(self, port: Port[str], text: str) -> None:
        port.send(f"{text}{current_rank().rank}")

    @endpoint
    def host_shutdown(self) -> str:
        try:
            this_host().shutdown()
        except RuntimeError as exc:
            return str(exc)
        return "shut down"


def test_size_of_several_dimensions(run):
    def main():
        procs = this_host().spawn_procs({"dp": 2, "tp": 3})
        with pytest.raises(KeyError, match="no dimension 'pp'"):
            procs.size("pp")
        return procs.size(), procs.size("tp"), procs.size(["dp", "tp"]), procs.size(("tp",))

    assert run(main) == (6, 3, 6, 3)


def test_host_mesh_shutdown_stops_its_procs_and_ends_it(run):
    def main():
        host = this_host()
        procs = host.spawn_procs({"gpus": 2})
        echo = procs.spawn("echo", Echo)
        echo.rank.call().get()
        host.shutdown().get()
        with pytest.raises(Exception, match="stopped"):
            echo.rank.call().get()
        with pytest.raises(RuntimeError, match="already been shut down"):
            host.spawn_procs({"gpus": 1})
        with pytest.raises(RuntimeError, match="already been shut down"):
            host.shutdown()
        fresh = this_host().spawn_procs().spawn("echo", Echo)
        return fresh.rank.call_one().get()

    assert run(main) == 0


def test_references_to_hosts_cannot_be_shut_down(run):
    def main():
        host = this_host()
        with pytest.raises(RuntimeError, match="reference instead of owned"):
            host.slice().shutdown()
        with pytest.raises(RuntimeError, match="reference instead of owned"):
            pickle.loads(pickle.dumps(host)).shutdown()
        inside = this_host().spawn_procs().spawn("echo", Echo)
        return inside.host_shutdown.call_one().get()

    assert "reference instead of owned" in run(main)


def test_async_with_a_host_mesh_shuts_it_down(run):
    async def main():
        async with this_host() as host:
            echo = host.spawn_procs().spawn("echo", Echo)
            await echo.rank.call_one()
        with pytest.raises(RuntimeError, match="already been shut down"):
            host.spawn_procs()
        return True

    assert run(main)


def test_futures_as_asyncio_futures(run):
    async def main():
        echo = this_host().spawn_procs({"gpus": 3}).spawn("echo", Echo)
        futures = [echo.slice(gpus=i).spawn_rank.call_one() for i in range(3)]
        done, _ = await asyncio.wait([f.as_asyncio() for f in futures])
        again = await futures[1].as_asyncio()
        return sorted(t.result() for t in done), again, futures[2].get()

    assert run(main) == ([0, 1, 2], 1, 2)


def test_as_asyncio_needs_a_running_loop(run):
    def main():
        echo = this_host().spawn_procs().spawn("echo", Echo)
        future = echo.rank.call_one()
        with pytest.raises(RuntimeError, match="running asyncio event loop"):
            future.as_asyncio()
        return future.get()

    assert run(main) == 0


def test_ranked_view_of_a_receiver(run):
    def main():
        echo = this_host().spawn_procs({"gpus": 2}).spawn("echo", Echo)
        port, receiver = Channel.open()
        ranked = receiver.ranked()
        echo.report.broadcast(port, "a")
        first = sorted(ranked.recv().get() for _ in range(2))
        echo.report.broadcast(port, "b")
        then = sorted(receiver.recv().get() for _ in range(2))
        return first, then

    assert run(main) == ([(0, "a0"), (1, "a1")], ["b0", "b1"])
