"""A newcomer's mistakes with the API get errors that say what to do instead."""

from __future__ import annotations

import pytest

import danaus
import danaus.sim
from danaus import Actor, endpoint, this_host


class Trainer(Actor):
    @endpoint
    def train(self, step: int, *, lr: float = 0.1) -> float:
        return step * lr

    @endpoint
    def steps_done(self) -> int:
        return 0

    def helper(self) -> None:
        """A method without @endpoint."""


def mistake(attempt) -> BaseException:
    """What ``attempt(trainers)`` raises, on a simulated mesh of two trainers."""

    def main() -> BaseException:
        trainers = this_host().spawn_procs({"gpus": 2}).spawn("trainers", Trainer)
        with pytest.raises(Exception) as raised:
            attempt(trainers)
        return raised.value

    return danaus.sim.run(main).value


def test_a_mistyped_endpoint_suggests_the_closest_names():
    error = mistake(lambda trainers: trainers.trian)
    assert isinstance(error, AttributeError)
    assert str(error) == "actor mesh 'trainers' has no endpoint 'trian' (did you mean 'train'?)"


def test_a_name_close_to_none_lists_the_endpoints():
    error = mistake(lambda trainers: trainers.evaluate)
    assert str(error).endswith("has no endpoint 'evaluate'; its endpoints: train, steps_done")


@pytest.mark.parametrize("adverb", ["call", "call_one", "choose", "stream", "broadcast"])
def test_a_method_without_endpoint_says_so_for_every_adverb(adverb):
    error = mistake(lambda trainers: getattr(trainers.helper, adverb)())
    assert isinstance(error, AttributeError)
    assert str(error) == (
        "Trainer.helper is not an endpoint: mark the method @endpoint, or call it through "
        f"as_endpoint(mesh.helper).{adverb}(...)"
    )


def test_a_future_used_as_its_result_asks_for_get():
    error = mistake(lambda trainers: trainers.train.call(step=1).item(gpus=0))
    assert isinstance(error, AttributeError)
    assert "did you forget .get()?" in str(error)
    assert "(future.get().item)" in str(error)


def test_a_mistyped_keyword_is_named_as_unexpected_with_the_closest_parameter():
    error = mistake(lambda trainers: trainers.train.call(stp=1))
    assert isinstance(error, TypeError)
    assert str(error) == (
        "Trainer.train(): unexpected keyword argument 'stp' (did you mean 'step'?); "
        "missing a required argument: 'step' (it takes train(step, *, lr=...))"
    )


def test_too_many_arguments_show_the_signature():
    error = mistake(lambda trainers: trainers.steps_done.call(1))
    assert str(error) == (
        "Trainer.steps_done(): too many positional arguments (it takes steps_done())"
    )


@pytest.mark.parametrize(
    ("transport", "option", "suggested"),
    [("sim", "host", "'hosts'"), ("tcp", "heartbeat_intervl", "'heartbeat_interval'")],
)
def test_an_unknown_configure_option_lists_the_valid_ones(transport, option, suggested):
    with pytest.raises(TypeError) as raised:
        danaus.configure(transport=transport, **{option: 1})
    message = str(raised.value)
    assert message.startswith(f"configure(): transport {transport!r} has no option {option!r}")
    assert f"(did you mean {suggested}" in message
    assert "configured()" not in message
    assert "its options: " in message and "cast_fanout" in message
