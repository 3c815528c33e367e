"""How an actor is named, as Monarch names it: after its creators; and its log records."""

from __future__ import annotations

import io
import logging

import danaus
from danaus import Actor, context, endpoint, this_host

MODULE = __name__


def captured(message: str, *args: object, logger: str = "test.names") -> str:
    """What a handler of the program's own, added now, writes for one record."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger(logger)
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    try:
        log.error(message, *args)
    finally:
        log.removeHandler(handler)
    return stream.getvalue().rstrip("\n")


class Named(Actor):
    @endpoint
    def who(self) -> tuple[str, str, str | None, str]:
        me = context().actor_instance
        return str(me), me.creator.name, me.creator.class_name, me.creator.actor_id

    @endpoint
    def spawn_one(self) -> Named:
        return this_host().spawn_procs({"x": 1}).spawn("inner", Named)

    @endpoint
    def logs(self) -> list[str]:
        return [
            captured("step %d", 3),
            captured(""),
            captured("from danaus", logger="danaus.test"),
            captured("from self.logger", logger=self.logger.name),
        ]


def test_an_actor_is_named_after_its_creators(run):
    def main():
        named = this_host().spawn_procs({"f": 2}).spawn("the_name", Named)
        mine = named.slice(f=1).who.call_one().get(timeout=30)
        inner = named.slice(f=0).spawn_one.call_one().get(timeout=30)
        return mine, inner.who.call_one().get(timeout=30), str(context().actor_instance)

    mine, inner, controller = run(main)
    assert controller == "<root>"
    assert mine[:3] == (f"<root>.<{MODULE}.Named the_name{{'f': 1/2}}>", "root", None)
    assert inner[0] == (
        f"<root>.<{MODULE}.Named the_name{{'f': 0/2}}>.<{MODULE}.Named inner{{'x': 0/1}}>"
    )
    assert inner[1:3] == ("the_name", f"{MODULE}.Named") and inner[3].endswith("/the_name[0]")


def test_log_records_made_in_an_actor_begin_with_its_name(run):
    def main():
        named = this_host().spawn_procs({"f": 2}).spawn("the_name", Named)
        in_actor = named.slice(f=1).logs.call_one().get(timeout=30)
        in_controller = captured("done")
        danaus.config.prefix_python_logs_with_actor = False
        try:
            unnamed = captured("done")
        finally:
            danaus.config.prefix_python_logs_with_actor = True
        return in_actor, in_controller, unnamed

    in_actor, in_controller, unnamed = run(main)
    name = f"<root>.<{MODULE}.Named the_name{{'f': 1/2}}>"
    assert in_actor == [
        f"[actor={name}] step 3",
        "",
        "from danaus",
        f"[actor={name}] from self.logger",
    ]
    assert in_controller == "[actor=<root>] done"
    assert unnamed == "done"
