"""Builds what selection decided: instantiates the components and connects them to the strategy.

:mod:`fabric_core._kernel.selection` only decides; this is the one place that turns its :class:`Selection` into
objects, and so the place that checks what only a built component can say (whether the strategy's launcher
can run in a notebook).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fabric_core._kernel.selection import Choice, Selection, select
from fabric_core.errors import InteractiveSessionError

if TYPE_CHECKING:
    from fabric_core._kernel.manager import PluginManager

__all__ = ["Components", "assemble", "build"]


@dataclass
class Components:
    """The objects ``Fabric`` runs with; the strategy is connected to the others."""

    accelerator: Any
    strategy: Any
    precision: Any
    cluster_environment: Any
    checkpoint_io: Any
    loggers: list[Any]
    callbacks: list[Any]
    #: The cluster environment started the processes and `devices="auto"` counted them: join them at once.
    processes_exist: bool = False


def build(selection: Selection) -> Components:
    """Build the decided components and connect them (imports the chosen classes).

    Raises:
        InteractiveSessionError: The strategy's launcher cannot start processes from an interactive session.
        UnknownOptionError: An option the chosen class does not take.
    """
    from fabric_core.utilities.rank_zero import rank_zero_info

    context = selection.context
    for notice in selection.notices:
        rank_zero_info(notice)
    accelerator = _make(selection.accelerator)
    environment = _make(selection.environment)
    precision = _make(selection.precision)
    strategy = _make(selection.strategy)
    strategy.connect(
        accelerator=accelerator,
        precision=precision,
        checkpoint_io=selection.checkpoint_io,
        cluster_environment=environment,
        parallel_devices=list(context.parallel_devices),
        num_nodes=context.num_nodes,
    )
    launcher = getattr(strategy, "launcher", None)
    if context.interactive and launcher is not None and not launcher.is_interactive_compatible:
        raise InteractiveSessionError(
            f"`Fabric(strategy={context.strategy!r})` is not compatible with an interactive "
            "environment. Run your code as a script, or choose a strategy that forks, e.g. "
            "`Fabric(strategy='ddp_notebook')`.",
            argument="strategy",
            value=context.strategy,
        )
    return Components(
        accelerator=strategy.accelerator,
        strategy=strategy,
        precision=strategy.precision,
        # The strategy's own where it has one (an XLA strategy's is the XLA runtime's), as it is the one used.
        cluster_environment=getattr(strategy, "cluster_environment", None) or environment,
        checkpoint_io=strategy.checkpoint_io,
        loggers=[_make(c) for c in selection.loggers],
        callbacks=[_make(c) for c in selection.callbacks],
        processes_exist=context.devices_from_environment,
    )


def assemble(manager: PluginManager | None, **arguments: Any) -> Components:
    """Decide the components for ``Fabric(...)`` arguments (:func:`~fabric_core._kernel.selection.select`), then
    build them."""
    return build(select(manager, **arguments))


def _make(choice: Choice) -> Any:
    """The instance the user passed, or the catalog entry built with the decided options."""
    if choice.instance is not None:
        return choice.instance
    assert choice.entry is not None  # select() sets one of the two
    return choice.entry.build(choice.options)
