"""The ``Fabric`` object's internals: building what selection decided, argument checks, collectives, checkpoints.

:mod:`fabric_core.fabric` is the public class; these modules hold what it delegates to: ``assembly`` (builds and
connects the components the kernel selected), ``checks`` (argument and state checks with Lightning's wording),
``collectives`` (``barrier``, ``broadcast``, ``all_gather``, ``all_reduce``) and ``checkpoints`` (``save``,
``load``, ``load_raw``).
"""
