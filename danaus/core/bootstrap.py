"""How a proc's process is started: a command, with an environment of its own.

``spawn_procs(bootstrap_command=...)`` takes one `BootstrapCommand` for every
proc, or a function of the proc's `Point` (its coordinates over the host
mesh's dimensions and ``per_host``'s) that returns one per proc, so each proc
may get its own environment or wrapper (``numactl``, a profiler, another
interpreter). The command must end up running the transport's proc entry
point, which reads the proc's identity from its stdin.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from danaus.core.shape import Point, Shape


@dataclass(frozen=True)
class BootstrapCommand:
    """A program to run for a proc, its arguments, and variables added to its environment.

    ``arg0`` is what the program sees as its name (default: ``program``). The
    proc's environment is its host agent's, with ``env`` on top.
    """

    program: str
    arg0: str | None = None
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.program, str) or not self.program:
            raise TypeError(f"program must be a non-empty str, not {self.program!r}")
        if self.arg0 is not None and not isinstance(self.arg0, str):
            raise TypeError(f"arg0 must be a str or None, not {self.arg0!r}")
        if isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args):
            raise TypeError(f"args must be a list of str, not {self.args!r}")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()):
            raise TypeError(f"env must map str to str, not {dict(self.env)!r}")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "env", dict(self.env))

    def with_env(self, env: Mapping[str, str]) -> BootstrapCommand:
        """This command with ``env`` merged over its environment (``env`` wins)."""
        return BootstrapCommand(self.program, self.arg0, self.args, {**self.env, **env})

    def argv(self) -> list[str]:
        """The argument vector the process sees (``arg0`` first)."""
        return [self.arg0 or self.program, *self.args]


PYTHON_EXECUTABLE_ENV = "DANAUS_PYTHON_EXECUTABLE"
"""Set in the environment of a proc started by `with_python`: the executable it was started
with, which ``this_host()`` there spawns procs with in turn."""


def with_python(default: BootstrapCommand | None, python: str) -> BootstrapCommand:
    """``default`` (a world's command for a proc's process) run by ``python`` instead.

    None (a world whose procs are not processes): ``python`` with no arguments.
    """
    base = default if default is not None else BootstrapCommand(python)
    return replace(base, program=python, arg0=None).with_env({PYTHON_EXECUTABLE_ENV: python})


def inherited_python() -> str | None:
    """The executable this process was started with by `with_python`, if it was."""
    return os.environ.get(PYTHON_EXECUTABLE_ENV) or None


CommandChoice = BootstrapCommand | Callable[["Point"], BootstrapCommand] | None
"""What ``spawn_procs(bootstrap_command=...)`` accepts."""


def commands_for(choice: CommandChoice, shape: Shape) -> tuple[BootstrapCommand, ...] | None:
    """One command per member of ``shape`` (row-major), or None for the transport's default."""
    if choice is None:
        return None
    if isinstance(choice, BootstrapCommand):
        return (choice,) * len(shape)
    if not callable(choice):
        raise TypeError(
            f"bootstrap_command must be a BootstrapCommand or a function of a Point, not {choice!r}"
        )
    commands = []
    for index in range(len(shape)):
        point = shape.point(index)
        command = choice(point)
        if not isinstance(command, BootstrapCommand):
            raise TypeError(
                f"bootstrap_command({dict(point)}) returned {command!r}, not a BootstrapCommand"
            )
        commands.append(command)
    return tuple(commands)
