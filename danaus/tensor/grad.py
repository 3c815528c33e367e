"""`grad_generator`: the gradients of some tensors, one at a time, in the order asked for."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch


def grad_generator(
    roots: torch.Tensor | Sequence[torch.Tensor] = (),
    with_respect_to: Sequence[torch.Tensor] = (),
    grad_roots: Sequence[torch.Tensor | None] = (),
) -> Iterator[torch.Tensor]:
    """The gradient of ``roots`` with respect to each of ``with_respect_to``, in that order.

    The backward pass is recorded (for the procs) at the first ``next``; each
    gradient is then a handle of its own, ready for a collective while the
    next is taken. ``grad_roots`` are the gradients of ``roots`` (default: ones).
    """
    if isinstance(roots, torch.Tensor):
        roots = [roots]
    targets = list(with_respect_to)
    gradients = torch.autograd.grad(list(roots), targets, list(grad_roots) or None)
    yield from gradients
