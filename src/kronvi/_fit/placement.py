r"""Where a fit runs: on the device that holds its inputs, or on another one (e.g. the host CPU).

The statistics a fit reads are $O(b^2)$ whatever $n$ is, so copying them once per fit is cheap.
"""

from __future__ import annotations

import jax
import numpy as np

from .._base.checks import is_concrete


def is_traced(tree) -> bool:
    """Whether any leaf of `tree` is a tracer (the call is inside `jit`, `vmap`, `grad`...)."""
    return not all(is_concrete(x) for x in jax.tree.leaves(tree))


def devices_of(tree):
    """The devices holding the JAX arrays of `tree`."""
    out = set()
    for x in jax.tree.leaves(tree):
        if isinstance(x, jax.Array):
            out |= set(x.sharding.device_set)
    return out


def resolve_device(device, tree):
    """The device a fit of the arrays in `tree` runs on: `None` (where they are) or a `jax.Device`
    (concrete arrays only)."""
    if device is None:
        return None
    if isinstance(device, jax.Device):
        if is_traced(tree):
            raise ValueError(
                "`device` must be None inside jit, vmap or grad: a traced fit runs where its inputs are"
            )
        return device
    raise ValueError(f"`device` must be None or a jax.Device, got {device!r}")


def home_sharding(tree):
    """A sharding that puts results back where the arrays of `tree` live: their device, or replicated
    over their devices when they span several. `None` for host (NumPy) inputs."""
    devices = devices_of(tree)
    if not devices:
        return None
    if len(devices) == 1:
        return jax.sharding.SingleDeviceSharding(next(iter(devices)))
    mesh = jax.sharding.Mesh(np.array(sorted(devices, key=lambda d: d.id)), ("devices",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def run_on(device, fn, args, home):
    """`fn(*args)` with `args` copied to `device` once, the results copied back to `home`."""
    out = fn(*jax.device_put(args, device))
    return out if home is None else jax.device_put(out, home)
