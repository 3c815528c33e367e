"""Torch's per-process state, kept per proc where procs share one process (the simulator).

On a real transport each proc is a process: its torch generator, and each
stream thread's grad mode and mode stacks, are its own. On the simulator
every proc, and the controller, run in one thread of one process, taking
turns. A stream's work therefore swaps in its proc's generator state, the
default grad mode and empty mode stacks (the controller's ``mesh.activate()``
pushes a mode that must not see the procs' work) when it starts, and swaps
them out whenever it stops, to wait or when done, so that nothing of one proc
leaks into another or into the controller.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import _pop_mode, _push_mode


class Isolated:
    """The torch state of one simulated proc: its generator state, swapped in and out."""

    def __init__(self, generator_state: torch.Tensor) -> None:
        self.generator_state = generator_state

    def enter(self) -> _Saved:
        """Make this proc's state current; the returned value restores what was."""
        saved = _Saved(
            torch.get_rng_state(),
            torch.is_grad_enabled(),
            [_pop_mode() for _ in range(torch._C._len_torch_dispatch_stack())],
            [
                torch._C._pop_torch_function_stack()
                for _ in range(torch._C._len_torch_function_stack())
            ],
        )
        torch.set_rng_state(self.generator_state)
        torch.set_grad_enabled(True)
        return saved

    def leave(self, saved: _Saved) -> None:
        """Keep this proc's state and restore what `enter` found."""
        self.generator_state = torch.get_rng_state()
        torch.set_rng_state(saved.generator_state)
        torch.set_grad_enabled(saved.grad)
        for mode in reversed(saved.function_modes):
            torch._C._push_on_torch_function_stack(mode)
        for mode in reversed(saved.dispatch_modes):
            _push_mode(mode)


class _Saved:
    __slots__ = ("dispatch_modes", "function_modes", "generator_state", "grad")

    def __init__(
        self,
        generator_state: torch.Tensor,
        grad: bool,
        dispatch_modes: list[Any],
        function_modes: list[Any],
    ) -> None:
        self.generator_state = generator_state
        self.grad = grad
        self.dispatch_modes = dispatch_modes
        self.function_modes = function_modes
