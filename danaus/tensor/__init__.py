"""Distributed tensors: torch operations written in the controller, run on every proc of a mesh.

    with mesh.activate():
        w = torch.rand(1024, 1024)       # a shard on every proc of the mesh
        loss = (x @ w).sum()
        loss.backward()                  # the backward pass runs on the procs too
        g = w.grad.reduce("gpu", "avg")  # a collective over the "gpu" dimension
    print(danaus.inspect(loss, gpu=3))   # a value reaches the controller only when asked

The controller holds `Tensor` handles (shape, dtype and device, no data);
operations on them are recorded as commands, sent in batches to a tensor
worker on each proc, and run there in order. See the page *Distributed
tensors* of the documentation. This package needs torch (``pip install
'danaus[torch]'``); the names are also in ``danaus`` itself.
"""

try:
    import torch as _torch  # noqa: F401
except ModuleNotFoundError:
    raise ModuleNotFoundError(
        "the Danaus tensor engine needs torch: pip install 'danaus[torch]'"
    ) from None

from danaus.tensor.active import get_active_mesh, no_mesh
from danaus.tensor.errors import RemoteTensorError, TensorUsageError
from danaus.tensor.fetch import fetch_shard, inspect, show
from danaus.tensor.grad import grad_generator
from danaus.tensor.handle import Tensor
from danaus.tensor.moving import MeshSliceTensor, slice_mesh, to_mesh
from danaus.tensor.process_group import RemoteProcessGroup
from danaus.tensor.reduce import reduce_
from danaus.tensor.reduce import reduce_tree as reduce
from danaus.tensor.remote import Remote, call_on_shard_and_fetch, remote
from danaus.tensor.simulator import Simulator
from danaus.tensor.stream import Borrow, Stream, get_active_stream

__all__ = [
    "Borrow",
    "MeshSliceTensor",
    "Remote",
    "RemoteProcessGroup",
    "RemoteTensorError",
    "Simulator",
    "Stream",
    "Tensor",
    "TensorUsageError",
    "call_on_shard_and_fetch",
    "fetch_shard",
    "get_active_mesh",
    "get_active_stream",
    "grad_generator",
    "inspect",
    "no_mesh",
    "reduce",
    "reduce_",
    "remote",
    "show",
    "slice_mesh",
    "to_mesh",
]
