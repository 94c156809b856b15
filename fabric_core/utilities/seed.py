"""Seeding of every random number generator: the process's, each DataLoader worker's, each rank's.

The seed is recorded where Lightning records it, in ``PL_GLOBAL_SEED`` and ``PL_SEED_WORKERS``, and nowhere
else: processes started later (by ``fabric-core run``, a launcher, a spawned DataLoader worker) inherit the
environment, so ``reset_seed`` and ``seed_everything()`` there apply the same seed, and a program that checks
what seeding left in ``os.environ`` finds exactly what Lightning leaves.
"""

from __future__ import annotations

import logging
import os
import random
from typing import Any, Final

import torch

from fabric_core._deferred import lightning_reexports
from fabric_core.errors import ArgumentTypeError, InvalidConfigError
from fabric_core.utilities.rank_zero import (
    announced_rank,
    rank_prefixed_message,
    rank_zero_only,
    rank_zero_warn,
    show_info_lines,
)

__all__ = [
    "MAX_SEED_VALUE",
    "MIN_SEED_VALUE",
    "max_seed_value",
    "min_seed_value",
    "pl_worker_init_function",
    "recorded_seed",
    "reset_seed",
    "seed_everything",
    "seed_workers_enabled",
    "set_seed",
    "worker_init_function",
]

_log = logging.getLogger(__name__)

MIN_SEED_VALUE: Final = 0
# numpy's legacy global generator takes 32-bit seeds; every generator gets the same one.
MAX_SEED_VALUE: Final = 2**32 - 1
# Lightning's names of the same bounds.
min_seed_value: Final = MIN_SEED_VALUE
max_seed_value: Final = MAX_SEED_VALUE

# Lightning's names: seed_everything writes these two and nothing else.
SEED_ENV: Final = "PL_GLOBAL_SEED"
SEED_WORKERS_ENV: Final = "PL_SEED_WORKERS"
# Read only, where Lightning's variable is unset: a user may export them before the first seed_everything().
_OWN_SEED_ENV: Final = "FABRIC_CORE_GLOBAL_SEED"
_OWN_SEED_WORKERS_ENV: Final = "FABRIC_CORE_SEED_WORKERS"


def seed_everything(seed: int | None = None, workers: bool = False, verbose: bool = True) -> int:
    """Seed ``random``, ``numpy`` (if installed) and torch on every device, and record the seed.

    Args:
        seed: The seed. ``None`` reads ``PL_GLOBAL_SEED`` (then ``FABRIC_CORE_GLOBAL_SEED``), else uses 0.
        workers: Also seed each DataLoader worker distinctly (see :func:`worker_init_function`); Fabric
            installs that function on the dataloaders it sets up.
        verbose: Log the seed that was set.

    Returns:
        The seed that was set.

    Raises:
        InvalidConfigError: The seed is outside ``[0, 2**32 - 1]``, is not an integer (an ``ArgumentTypeError``,
            a ``TypeError`` too, for a type ``int()`` refuses), or the environment holds a non-integer.
    """
    if seed is None:
        seed = recorded_seed()
        if seed is None:
            seed = 0
            if verbose:
                rank_zero_warn(f"No seed found, seed set to {seed}", stacklevel=2)
    elif not isinstance(seed, int):
        seed = _as_int(seed)
    _check_bounds(seed)
    if verbose:
        show_info_lines()
        # Prefixed with the rank only where a launcher announced one (one process: plain "Seed set to 42").
        _log.info(rank_prefixed_message(f"Seed set to {seed}", announced_rank()))
    os.environ[SEED_ENV] = str(seed)
    _seed_generators(seed)
    os.environ[SEED_WORKERS_ENV] = str(int(workers))
    return seed


def _as_int(seed: Any) -> int:
    """Cast ``seed`` as Lightning does (``int(seed)``), with an error that names it when that fails."""
    try:
        return int(seed)
    except (TypeError, ValueError) as err:
        # Lightning documents a ValueError for a seed that cannot be cast; a wrong type is a TypeError as well.
        error = ArgumentTypeError if isinstance(err, TypeError) else InvalidConfigError
        raise error(
            f"`seed_everything(seed={seed!r})`: the seed must be an integer from {MIN_SEED_VALUE} to "
            f"{MAX_SEED_VALUE} (or a string of one), or None to reuse the recorded seed.",
            argument="seed",
            value=seed,
        ) from None


def reset_seed() -> None:
    """Apply again the seed that :func:`seed_everything` recorded; nothing if none was.

    Used in processes started after seeding (spawned workers), which inherit the environment only.
    """
    seed = recorded_seed()
    if seed is not None:
        seed_everything(seed, workers=seed_workers_enabled(), verbose=False)


def recorded_seed() -> int | None:
    """The seed in ``PL_GLOBAL_SEED`` (else ``FABRIC_CORE_GLOBAL_SEED``), or ``None`` if neither is set.

    Raises:
        InvalidConfigError: The variable does not hold an integer.
    """
    name, value = _first_set(SEED_ENV, _OWN_SEED_ENV)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidConfigError(
            f"Invalid seed specified via {name}: {value!r}; it must be an integer from {MIN_SEED_VALUE} to "
            f"{MAX_SEED_VALUE}.",
            argument="seed",
            value=value,
        ) from None


def seed_workers_enabled() -> bool:
    """Whether ``seed_everything(workers=True)`` asked for per-worker seeding (``PL_SEED_WORKERS=1``)."""
    return _first_set(SEED_WORKERS_ENV, _OWN_SEED_WORKERS_ENV)[1] == "1"


def _first_set(*names: str) -> tuple[str, str | None]:
    """The first of ``names`` set in the environment and its value; the last name and ``None`` if none is."""
    for name in names:
        value = os.environ.get(name)
        if value is not None:
            return name, value
    return names[-1], None


def worker_init_function(worker_id: int, rank: int | None = None) -> None:
    """Give DataLoader worker ``worker_id`` of global rank ``rank`` its own seeds for torch, random, numpy.

    The seeds are mixed from (the loader's base seed, ``rank``, ``worker_id``), so they are deterministic
    for a seeded run, distinct across ranks and workers, and independent of each other, where torch's
    default (``base_seed + worker_id``, the same on every rank, and numpy left alone) is not. They are
    Lightning's, bit for bit: a run seeded alike draws the same numbers in its workers under either.

    Args:
        worker_id: The worker's index, as DataLoader passes it.
        rank: The process's global rank; defaults to the rank known to ``rank_zero_only``.
    """
    global_rank = rank_zero_only.rank if rank is None else rank
    # DataLoader seeds worker ``i`` with ``base_seed + i``; recover the base shared by all workers.
    base_seed = torch.initial_seed() - worker_id
    _log.debug("Seeding worker %d of rank %d from base seed %d", worker_id, global_rank, base_seed)
    seeds = _worker_seed_sequence(base_seed, worker_id, global_rank, count=4)
    torch.manual_seed(seeds[0])
    random.seed((seeds[1] << 32) | seeds[2])
    np = _numpy()
    if np is not None:
        np.random.seed(np.random.SeedSequence([base_seed, worker_id, global_rank]).generate_state(4))


#: Lightning's name for :func:`worker_init_function`.
pl_worker_init_function: Final = worker_init_function


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed ``random``, ``numpy`` (if installed) and torch on every device (Accelerate's helper).

    Unlike :func:`seed_everything`, nothing is recorded in the environment.

    Args:
        seed: The seed.
        device_specific: Add the global rank (from ``torch.distributed`` once initialised) to the seed,
            so that each process draws different numbers.
        deterministic: Also call ``torch.use_deterministic_algorithms(True)``.

    Raises:
        InvalidConfigError: The (rank-adjusted) seed is outside ``[0, 2**32 - 1]``.
    """
    if device_specific:
        seed += _process_index()
    _check_bounds(seed)
    _seed_generators(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)


def _check_bounds(seed: int) -> None:
    if not MIN_SEED_VALUE <= seed <= MAX_SEED_VALUE:
        raise InvalidConfigError(
            f"{seed} is not in bounds, numpy accepts from {MIN_SEED_VALUE} to {MAX_SEED_VALUE}",
            argument="seed",
            value=seed,
        )


def _seed_generators(seed: int) -> None:
    random.seed(seed)
    np = _numpy()
    if np is not None:
        np.random.seed(seed)
    # Seeds the CPU generator and, lazily, every accelerator's (CUDA, MPS, XPU): no device is touched here.
    torch.manual_seed(seed)


_MASK64: Final = (1 << 64) - 1


def _worker_seed_sequence(base_seed: int, worker_id: int, global_rank: int, count: int) -> list[int]:
    """``count`` 64-bit seeds for one worker, as Lightning derives them (its runs must replay here).

    The three inputs are packed into one number, spread over 64 bits with MurmurHash3's finalizer (so a
    small base seed still sets the low bits), then stepped with Knuth's 64-bit linear congruential generator.
    """
    # Not masked before the first mix, as Lightning does not: the high bits of a 64-bit base seed fold in.
    mixed = (base_seed << 32) | (worker_id << 16) | global_rank
    mixed ^= mixed >> 33
    mixed = (mixed * 0xFF51AFD7ED558CCD) & _MASK64
    mixed ^= mixed >> 33
    mixed = (mixed * 0xC4CEB9FE1A85EC53) & _MASK64
    mixed ^= mixed >> 33
    seeds = []
    for _ in range(count):
        mixed = (mixed * 6364136223846793005 + 1) & _MASK64
        seeds.append(mixed)
    return seeds


def _process_index() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return 0


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is optional for the core
        return None
    return numpy


def collect_rng_states(include_cuda: bool = True) -> dict[str, Any]:
    """The global random states of torch, Python, NumPy (when installed) and, if asked, every CUDA device.

    Keys as Lightning's ``_collect_rng_states``: ``"torch"``, ``"python"``, ``"numpy"``, ``"torch.cuda"``
    (an empty list without CUDA), so that states saved by either restore with either.
    """
    states: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    numpy = _numpy()
    if numpy is not None:
        states["numpy"] = numpy.random.get_state()
    if include_cuda:
        states["torch.cuda"] = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return states


def set_rng_states(rng_state_dict: dict[str, Any]) -> None:
    """Restore what :func:`collect_rng_states` returned (``"numpy"`` and ``"torch.cuda"`` where present)."""
    torch.set_rng_state(rng_state_dict["torch"])
    if "torch.cuda" in rng_state_dict:
        torch.cuda.set_rng_state_all(rng_state_dict["torch.cuda"])
    numpy = _numpy()
    if numpy is not None and "numpy" in rng_state_dict:
        numpy.random.set_state(rng_state_dict["numpy"])
    version, state, gauss = rng_state_dict["python"]
    random.setstate((version, tuple(state), gauss))  # a state read back from JSON or a checkpoint has a list


# Lightning's private names for the helpers above.
_collect_rng_states = collect_rng_states
_set_rng_states = set_rng_states
_generate_seed_sequence = _worker_seed_sequence

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
