"""Service discovery through a controller: a port of Monarch's documented "services" example.

Monarch's tutorial on worker pools keeps a pool of workers behind a Service
actor (round-robin routing, health marks) and lets any part of a program find
services by name through a registry that ``get_or_spawn_controller`` makes a
singleton of. This program does the same with Monarch's API only: the import
below is the one line that names Danaus (``from monarch.actor import ...`` on
Monarch).
"""

from __future__ import annotations

from danaus import Actor, endpoint, get_or_spawn_controller, this_host


class Worker(Actor):
    """Replica ``index`` of a service; fails every request if its index is in ``bad``."""

    def __init__(self, index: int, bad: tuple[int, ...] = ()) -> None:
        self.rank = index
        self.bad = bad

    @endpoint
    def ping(self) -> bool:
        return True

    @endpoint
    def process(self, request: str) -> str:
        if self.rank in self.bad:
            raise RuntimeError(f"worker {self.rank} cannot process {request}")
        return f"{request} done by worker {self.rank}"


class Service(Actor):
    """A pool of one-proc worker replicas, used round-robin, skipping unhealthy ones."""

    def __init__(self, name: str, procs, **worker_args) -> None:
        self.name = name
        self.replicas = [
            procs.slice(procs=i).spawn(f"{name}_{i}", Worker, i, **worker_args)
            for i in range(len(procs))
        ]
        self.healthy = list(range(len(self.replicas)))
        self.turn = 0

    @endpoint
    def next_replica(self):
        if not self.healthy:
            raise RuntimeError(f"service {self.name} has no healthy replica")
        index = self.healthy[self.turn % len(self.healthy)]
        self.turn += 1
        return index, self.replicas[index]

    @endpoint
    def mark_unhealthy(self, index: int) -> None:
        if index in self.healthy:
            self.healthy.remove(index)

    @endpoint
    def health(self) -> dict[str, int]:
        return {"healthy": len(self.healthy), "total": len(self.replicas)}


class Registry(Actor):
    """The job's service directory: there is one, whoever asks for it first."""

    def __init__(self) -> None:
        self.services = {}

    @endpoint
    def register(self, name: str, service) -> None:
        self.services[name] = service

    @endpoint
    def lookup(self, name: str):
        if name not in self.services:
            raise KeyError(f"no service {name!r}")
        return self.services[name]

    @endpoint
    def names(self) -> list[str]:
        return sorted(self.services)


def registry() -> Registry:
    return get_or_spawn_controller("service_registry", Registry).get()


def call_service(name: str, request: str, attempts: int = 3) -> str:
    """Call a service by name; a replica that fails is marked unhealthy and another tried."""
    service = registry().lookup.call_one(name).get()
    for _ in range(attempts):
        index, replica = service.next_replica.call_one().get()
        try:
            return replica.process.call_one(request).get()
        except Exception:
            service.mark_unhealthy.call_one(index).get()
    raise RuntimeError(f"{name}: every attempt failed")


class Frontend(Actor):
    """Another part of the program: it finds services by name, holding no reference."""

    @endpoint
    def handle(self, request: str) -> str:
        return call_service("echo", request)

    @endpoint
    def known(self) -> list[str]:
        return registry().names.call_one().get()


def main() -> dict[str, object]:
    host = this_host()
    echo = host.spawn_procs(per_host={"procs": 1}).spawn(
        "echo", Service, "echo", host.spawn_procs(per_host={"procs": 3})
    )
    flaky = host.spawn_procs(per_host={"procs": 1}).spawn(
        "flaky", Service, "flaky", host.spawn_procs(per_host={"procs": 3}), bad=(1,)
    )
    registry().register.call_one("echo", echo).get()
    registry().register.call_one("flaky", flaky).get()

    round_robin = [call_service("echo", f"r{i}") for i in range(4)]
    with_failures = [call_service("flaky", f"f{i}") for i in range(4)]
    frontend = host.spawn_procs(per_host={"procs": 1}).spawn("frontend", Frontend)
    return {
        "round_robin": round_robin,
        "with_failures": with_failures,
        "flaky_health": flaky.health.call_one().get(),
        "discovered": frontend.handle.call_one("via frontend").get(),
        "known": frontend.known.call_one().get(),
    }


if __name__ == "__main__":
    print(main())
