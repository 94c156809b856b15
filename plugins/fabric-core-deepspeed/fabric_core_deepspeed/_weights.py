"""A module's whole weights in and out under ZeRO stage 3, whose parameters are partitioned: ``fabric.save_raw``,
safetensors ``fabric.load_raw`` and a consolidated state dict (``load_module_state_dict``).

Stage-3 parameters hold a flat partition that no weight name maps onto a byte range of, so both gather the
module's parameters (``GatheredParameters``) for the time of the call: a save gathers on every rank and rank 0
writes; a load reads on every rank into the gathered parameters and rank 0's are kept. Stages 0-2 keep whole
parameters on every rank and use the strategy's defaults.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from torch.nn import Module

from fabric_core.io.weights.pieces import Piece, persistent_targets, save_sources


class ZeroWeights:
    """The two hooks of :class:`~fabric_core.strategies.strategy.Strategy` for stage 3 (a mixin)."""

    if TYPE_CHECKING:  # provided by DeepSpeedStrategy

        @property
        def zero_stage_3(self) -> bool: ...

        @property
        def is_global_zero(self) -> bool: ...

        _engines: list[Any]

        def gathered_parameters(self, params: Any, modifier_rank: int | None = None) -> Any: ...

    def _inner(self, module: Module) -> Module:
        return getattr(module, "module", module)  # a DeepSpeed engine holds the user's module

    def load_module_state_dict(self, module: Module, state_dict: dict[str, Any], strict: bool = True) -> None:
        """Load a whole (consolidated) state dict; under stage 3 the parameters are gathered to take it."""
        engine = next((e for e in self._engines if module is e or module is e.module), None)
        target = engine.module if engine is not None else module
        with self.gathered_parameters(list(target.parameters()), modifier_rank=0):
            target.load_state_dict(state_dict, strict=strict)

    def weights_to_save(self, module: Module, whole: bool = False) -> list[Piece]:
        if not self.zero_stage_3:
            return super().weights_to_save(module, whole)  # type: ignore[misc, no-any-return]
        inner = self._inner(module)
        with self.gathered_parameters(list(inner.parameters())):
            pieces = save_sources(inner.state_dict(), self.is_global_zero)
            for piece in pieces:
                # Copied while gathered (rank 0 only): the whole module on rank 0 for the time of the save.
                data = piece.fetch()
                copy = None if data is None else data.detach().clone()
                piece.fetch = lambda copy=copy: copy  # type: ignore[misc]
        return pieces

    @contextlib.contextmanager
    def weights_to_load(self, module: Module) -> Iterator[list[Piece]]:
        if not self.zero_stage_3:
            with super().weights_to_load(module) as targets:  # type: ignore[misc]
                yield targets
            return
        inner = self._inner(module)
        with self.gathered_parameters(list(inner.parameters()), modifier_rank=0):
            yield persistent_targets(inner)
