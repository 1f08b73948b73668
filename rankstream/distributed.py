"""Distributed and sharded evaluation: reductions of core states and sampler padding.

A rankstream state is a bag of sums, so the result over many workers is the result of the
field-wise SUM of their states, whatever the split of the data. Three ways to get it:

* **PyTorch-Ignite**: nothing to do. ``rankstream.ignite`` metrics all-reduce their state
  through ``ignite.distributed`` inside ``compute()`` (``idist.Parallel`` with gloo or nccl,
  or any process group ignite can see). ``compute()`` is a collective: every rank calls it,
  for each metric in the same order (attached metrics do it on ``EPOCH_COMPLETED``), also
  a rank whose shard holds no usable list. A rank with no batch at all cannot run an
  ``Engine`` (ignite refuses empty data): it calls ``compute()`` on its fresh metrics, in
  attach order. ``compute()`` leaves each rank's own sums untouched, so calling it twice
  or updating after it stays correct.
* **Custom torch loops**: :func:`all_reduce_state` sums a core :class:`~rankstream.State`
  over a ``torch.distributed`` process group (one ``all_reduce`` of one float64 tensor)::

      st = State(MAPKernel(top_k=[1, 10]))
      for scores, labels in my_shard:
          st.update(scores, labels)
      total = all_reduce_state(st)          # collective: every rank calls it
      print(total.compute())                # same number on every rank

* **A catalog split over processes** (:mod:`rankstream.catalog`): :func:`sum_over_processes`
  is the ``reduce=`` of ``CatalogMetrics(..., shard=(start, stop), num_items=N)``; queries split
  over processes merge with :func:`all_reduce_state` of ``CatalogMetrics.state``.
* **Any map-reduce engine** (``concurrent.futures``, Spark, Ray, Dask): compute one state
  per shard and :func:`~rankstream.merge` them; states pickle, and so do their
  ``state_dict()`` (a dict of numpy arrays). See ``examples/mapreduce_shards.py``.

Padded samples. ``torch.utils.data.DistributedSampler`` and ignite's
``DistributedProxySampler`` (what ``idist.auto_dataloader`` builds under N > 1 processes)
with ``drop_last=False`` pad the data with duplicates so every rank gets the same number
of samples; the duplicated lists are then counted twice and the distributed result differs
from the single-process one. :func:`padding_weights` and :func:`batch_padding_weights`
give a per-list weight of 1 for real samples and 0 for the padded duplicates; pass it as
the metric's ``sample_weight`` (multiplied by your own weights, if any; a list or task of
weight 0 is not counted at all), with any rankstream Ignite metric::

    def eval_step(engine, batch):
        x, y = batch
        i = (engine.state.iteration - 1) % engine.state.epoch_length   # batch index in the epoch
        w = batch_padding_weights(loader.sampler, i, loader.batch_size)
        return model(x), y, {"sample_weight": w}

Checkpoints. An ignite metric's ``state_dict()`` holds its sums (one entry per rank under
distributed runs; ``load_state_dict`` picks this rank's). When an ``Engine`` resumes a run
from a mid-epoch checkpoint it fires ``EPOCH_STARTED`` again; rankstream's metrics keep a
state loaded before ``run()`` through that event (and reset as usual at any epoch start
that is not a mid-epoch resume), so the resumed epoch gives the uninterrupted result::

    Checkpoint.load_objects({"evaluator": evaluator, "map": metric}, ckpt)
    evaluator.run(data)     # DeterministicEngine skips the batches already seen

Imports are lazy: torch is needed only by the functions that take a sampler or a process
group; :func:`~rankstream.merge` needs neither.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from rankstream.core.state import State, merge, split_flat

__all__ = [
    "all_reduce_state",
    "batch_padding_weights",
    "merge",
    "padding_weights",
    "real_sample_count",
    "sum_over_processes",
]


# ---------------------------------------------------------------------------------------
# torch.distributed recipe for custom loops
# ---------------------------------------------------------------------------------------
def _reduce_device(group: Any) -> Any:
    """CPU for backends that reduce CPU tensors (gloo, mpi), else the current accelerator."""
    import torch
    import torch.distributed as dist

    backend = str(dist.get_backend(group)).lower()
    if "gloo" in backend or "mpi" in backend:
        return torch.device("cpu")
    accelerator = torch.accelerator.current_accelerator() if hasattr(torch, "accelerator") else None
    if accelerator is not None:
        return torch.device(accelerator.type, torch.accelerator.current_device_index())
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_state(state: State, group: Any = None, *, device: Any = None) -> State:
    """The SUM of ``state`` over every rank of a ``torch.distributed`` process group.

    A collective: every rank of ``group`` must call it, with a state of the same kernel
    configuration (same fields), also a rank that saw no data (its state is zeros, the
    identity of the sum). The whole state moves as ONE float64 tensor in one
    ``all_reduce(op=SUM)``.

    Args:
        state: this rank's :class:`~rankstream.State` (left unchanged, so it can keep
            accumulating and be reduced again later without double counting).
        group: the process group (``None``: the default group).
        device: where the reduction tensor lives; default CPU for gloo / mpi and the
            current accelerator (e.g. ``cuda:<current device>``) for nccl and others.

    Returns:
        A new :class:`~rankstream.State` holding the global sums; ``.compute()`` on it
        gives, on every rank, the number a single process gets over all the data. Outside
        an initialised process group this is a copy of ``state`` (a world of one).
    """
    import torch
    import torch.distributed as dist

    if not isinstance(state, State):
        raise TypeError(f"state must be a rankstream State, got {type(state).__name__}")
    fields = state.kernel.fields
    if not (dist.is_available() and dist.is_initialized()):
        return State(state.kernel, state.sums)
    flat = np.concatenate([np.asarray(state.sums[n], dtype=np.float64).reshape(-1) for n in fields])
    dev = torch.device(device) if device is not None else _reduce_device(group)
    buf = torch.as_tensor(flat, dtype=torch.float64).to(dev)
    dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=group)
    total = buf.cpu().numpy().astype(np.float64)
    return State(state.kernel, split_flat(total, fields))


def sum_over_processes(group: Any = None, *, device: Any = None) -> Callable[[np.ndarray], np.ndarray]:
    """``reduce=`` of a catalog split over ``torch.distributed`` processes
    (:class:`rankstream.catalog.CatalogMetrics` with ``shard=``): a function giving the SUM of a
    float64 array over every rank of ``group`` (one ``all_reduce(op=SUM)`` per call; the
    count arrays of a batch, ``O(queries x relevant)``, never a score). Outside an initialised
    process group it returns its input (a world of one). ``device`` as :func:`all_reduce_state`."""
    import torch
    import torch.distributed as dist

    def reduce(x: np.ndarray) -> np.ndarray:
        if not (dist.is_available() and dist.is_initialized()):
            return np.asarray(x, np.float64)
        dev = torch.device(device) if device is not None else _reduce_device(group)
        buf = torch.as_tensor(np.asarray(x, np.float64)).to(dev)
        dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=group)
        return buf.cpu().numpy().astype(np.float64)

    return reduce


# ---------------------------------------------------------------------------------------
# DistributedSampler padding
# ---------------------------------------------------------------------------------------
def _sampler_layout(sampler: Any) -> tuple[int, int, int, int]:
    """``(num_samples, rank, num_replicas, dataset_len)`` of a distributed sampler, or of a
    plain sampler seen as a world of one without padding."""
    if not hasattr(sampler, "__len__"):
        raise TypeError(f"sampler must have a length, got {type(sampler).__name__}")
    num_samples = len(sampler)
    attrs = ("num_replicas", "rank", "dataset")
    if not all(hasattr(sampler, a) for a in attrs):
        return num_samples, 0, 1, num_samples  # not a distributed sampler: nothing is padded
    world, rank = int(sampler.num_replicas), int(sampler.rank)
    n = len(sampler.dataset)
    if not (0 <= rank < world):
        raise ValueError(f"sampler has rank {rank} outside [0, num_replicas={world})")
    if num_samples * world < n and not getattr(sampler, "drop_last", False):
        raise ValueError(
            f"sampler yields {num_samples} samples on each of {world} ranks for a dataset of {n}: "
            "not the DistributedSampler layout (position p of rank r = global position r + p * num_replicas)"
        )
    return num_samples, rank, world, n


def real_sample_count(sampler: Any) -> int:
    """How many of the samples this rank's ``sampler`` yields are real (not padding).

    ``DistributedSampler(drop_last=False)`` (and ignite's ``DistributedProxySampler``) lays
    the (shuffled) dataset out in ``num_samples * num_replicas`` global positions, the last
    ``total_size - len(dataset)`` being repeats of samples from the start, and gives rank
    ``r`` the positions ``r, r + num_replicas, r + 2 * num_replicas, ...``. Its local
    position ``p`` is therefore padding iff ``r + p * num_replicas >= len(dataset)``: the
    padding is always at the END of a rank's stream, whatever the shuffle and the epoch.
    A sampler without ``num_replicas`` / ``rank`` / ``dataset`` attributes (e.g. the
    ``SequentialSampler`` that ``idist.auto_dataloader`` uses on one process) pads nothing.
    """
    num_samples, rank, world, n = _sampler_layout(sampler)
    return max(0, min(num_samples, math.ceil((n - rank) / world)))


def padding_weights(
    sampler: Any,
    positions: int | slice | range | Iterable[int] | Any,
    *,
    dtype: Any = None,
    device: Any = None,
) -> Any:
    """Per-sample weights, 1.0 for real samples and 0.0 for padded duplicates, at the given
    positions of this rank's ``sampler`` stream (0-based, in the order the sampler yields).

    Pass them as ``sample_weight`` to any rankstream metric: a list of weight 0 is not
    counted, so the distributed result equals the single-process one over the dataset.

    Args:
        sampler: a ``torch.utils.data.DistributedSampler`` (or subclass such as ignite's
            ``DistributedProxySampler``); any other sized sampler pads nothing.
        positions: an int, a ``slice`` / ``range``, or a sequence / 1-D tensor of ints.
        dtype: torch dtype of the result (default ``torch.float64``).
        device: torch device of the result (default CPU).

    Returns:
        A 1-D torch tensor (0-D for an int position).

    See :func:`real_sample_count` for the layout it relies on, and
    :func:`batch_padding_weights` for the weights of a whole DataLoader batch.
    """
    import torch

    n_real = real_sample_count(sampler)
    num_samples = len(sampler)
    dtype = torch.float64 if dtype is None else dtype
    if isinstance(positions, slice):
        positions = range(*positions.indices(num_samples))
    scalar = isinstance(positions, (int, np.integer)) and not isinstance(positions, bool)
    pos = torch.as_tensor(list(positions) if isinstance(positions, range) else positions, dtype=torch.int64)
    if pos.numel() and (int(pos.min()) < 0 or int(pos.max()) >= num_samples):
        raise ValueError(
            f"positions must lie in [0, len(sampler)={num_samples}), got min {int(pos.min())} "
            f"and max {int(pos.max())}"
        )
    out = (pos < n_real).to(dtype=dtype)
    if device is not None:
        out = out.to(device)
    return out.reshape(()) if scalar else out.reshape(-1)


def _as_int(value: Any, name: str, minimum: int) -> int:
    try:
        out = operator.index(value)  # int, numpy integer, 0-d integer tensor
    except TypeError:
        out = None
    if out is None or isinstance(value, bool) or out < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return out


def batch_padding_weights(
    sampler: Any, batch_index: int, batch_size: int, *, dtype: Any = None, device: Any = None
) -> Any:
    """Weights (1.0 real, 0.0 padded duplicate) of the lists of batch ``batch_index`` (0-based
    within the epoch) of a ``DataLoader(dataset, batch_size=batch_size, sampler=sampler)``
    (``drop_last=False``; the last batch may be shorter and so is its weight vector).

    In an ignite evaluator the batch index is
    ``(engine.state.iteration - 1) % engine.state.epoch_length``, which stays right when a
    run is resumed from a checkpoint.
    """
    batch_size = _as_int(batch_size, "batch_size", minimum=1)
    batch_index = _as_int(batch_index, "batch_index", minimum=0)
    num_samples = len(sampler)
    start = batch_index * batch_size
    if start >= num_samples:
        raise ValueError(
            f"batch {batch_index} of size {batch_size} starts at position {start}, past the "
            f"{num_samples} samples of this rank's sampler"
        )
    return padding_weights(
        sampler, range(start, min(start + batch_size, num_samples)), dtype=dtype, device=device
    )
