"""Strategy advisor: which dp x tp x pp, micro-batch, recomputation and ZeRO stage to train with.

The names the README and the parallelism lab use, in one place:

- :func:`advise`, :func:`pareto_front`, :data:`ADVISE_COLUMNS`, :data:`COLUMN_UNITS`: the search
  (:mod:`dlexplore.model.strategy`; ``pareto_front`` is its ``pareto_configurations``);
- :class:`AdvisorWidget`: its widget (:mod:`dlexplore.widgets.advisor`), imported on first use so that
  this module stays free of ipywidgets.

Command line: ``dlexplore advise --workload gpt2-xl --gpus 64 --gpu A100-80GB --network IB-HDR
--batch-size 512 --top 10 --format table`` (:mod:`dlexplore.cli.advise`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .model.strategy import ADVISE_COLUMNS, COLUMN_UNITS, advise
from .model.strategy import pareto_configurations as pareto_front

if TYPE_CHECKING:
    from .widgets.advisor import AdvisorWidget

__all__ = ["advise", "pareto_front", "AdvisorWidget", "ADVISE_COLUMNS", "COLUMN_UNITS"]


def __getattr__(name: str) -> Any:
    if name == "AdvisorWidget":
        from .widgets.advisor import AdvisorWidget

        return AdvisorWidget
    raise AttributeError(f"module 'dlexplore.advisor' has no attribute {name!r}")
