"""What callers see when endpoints raise or arguments are wrong."""

from __future__ import annotations

import threading

import pytest

from danaus import Actor, ActorError, SerializationError, endpoint, this_host


class Faulty(Actor):
    def __init__(self) -> None:
        self.calls = 0

    @endpoint
    def explode(self, message: str) -> None:
        self.calls += 1
        _deep_helper(message)

    @endpoint
    def count(self) -> int:
        return self.calls

    @endpoint
    def takes(self, a: int, b: int = 2, *, c: int) -> int:
        return a + b + c

    @endpoint
    def unpicklable_result(self) -> object:
        return threading.Lock()


def _deep_helper(message: str) -> None:
    raise ValueError(message)


def test_endpoint_exception_under_call_is_an_actor_error_and_the_actor_lives(run):
    def main():
        faulty = this_host().spawn_procs({"gpus": 2}).spawn("f", Faulty)
        with pytest.raises(ActorError) as info:
            faulty.explode.call("boom").get()
        err = info.value
        alive = list(faulty.count.call().get().values())
        return type(err.exception).__name__, str(err.exception), err.traceback, str(err), alive

    kind, text, tb, rendered, alive = run(main)
    assert (kind, text) == ("ValueError", "boom")
    assert "_deep_helper" in tb and "explode" in tb
    assert "/f[" in rendered and "boom" in rendered and "remote traceback" in rendered
    assert alive == [1, 1]


def test_each_adverb_raises_actor_error(run):
    def main():
        faulty = this_host().spawn_procs({"gpus": 2}).spawn("f", Faulty)
        kinds = []
        for future in [
            faulty.slice(gpus=0).explode.call_one("x"),
            faulty.explode.choose("y"),
            *faulty.explode.stream("z"),
        ]:
            with pytest.raises(ActorError):
                future.get()
            kinds.append("ActorError")
        return kinds

    assert run(main) == ["ActorError"] * 4


def test_bad_arguments_raise_type_error_at_the_call_site(run):
    def main():
        faulty = this_host().spawn_procs().spawn("f", Faulty)
        for bad in [
            lambda: faulty.takes.call(1),
            lambda: faulty.takes.call(1, 2, 3, c=4),
            lambda: faulty.takes.call(1, d=5, c=1),
            lambda: faulty.count.broadcast(1),
        ]:
            with pytest.raises(TypeError, match="Faulty"):
                bad()
        return faulty.takes.call_one(1, c=3).get()

    assert run(main) == 6


def test_bad_constructor_arguments_raise_at_spawn(run):
    def main():
        procs = this_host().spawn_procs()
        with pytest.raises(TypeError, match="Faulty"):
            procs.spawn("f", Faulty, 1)
        with pytest.raises(TypeError, match=r"subclass of danaus\.Actor"):
            procs.spawn("f", dict)
        return True

    assert run(main)


def test_unpicklable_argument_raises_a_clear_error_at_the_call_site(run):
    def main():
        faulty = this_host().spawn_procs().spawn("f", Faulty)
        with pytest.raises(SerializationError, match=r"Faulty\.explode.*pickle") as info:
            faulty.explode.call(threading.Lock())
        assert isinstance(info.value, TypeError)
        return faulty.count.call_one().get()

    assert run(main) == 0


def test_unpicklable_result_becomes_an_actor_error(run):
    def main():
        faulty = this_host().spawn_procs().spawn("f", Faulty)
        with pytest.raises(ActorError, match="pickle"):
            faulty.unpicklable_result.call_one().get()
        return faulty.count.call_one().get()

    assert run(main) == 0


def test_unknown_endpoint_is_an_attribute_error(run):
    def main():
        faulty = this_host().spawn_procs().spawn("f", Faulty)
        with pytest.raises(AttributeError, match="no endpoint 'nope'"):
            faulty.nope  # noqa: B018
        return True

    assert run(main)


def test_endpoint_names_that_clash_with_mesh_attributes_are_refused(run):
    class Clashing(Actor):
        @endpoint
        def stop(self) -> None: ...

    def main():
        with pytest.raises(ValueError, match="clash"):
            this_host().spawn_procs().spawn("c", Clashing)
        return True

    assert run(main)
