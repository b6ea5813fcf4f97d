"""What-if replay of a measured iteration (``dlexplore.sim``).

    from dlexplore.sim import whatif, scenario_summary
    ds = whatif(dlexplore.load_trace("run/"), bandwidth=2, gpus=[2, 8, 64])
    scenario_summary(ds)                # one row per scenario: measured vs replayed step time

- :func:`build_graph`: the dependency graph of a trace (lanes cut into segments, collectives matched
  across ranks, what waits for what), :mod:`dlexplore.sim.graph`;
- :func:`replay`, :func:`replay_events`: the discrete-event replay under :class:`Scenario` s, and the
  replayed event table (lays over the measured one, e.g. in ``TraceView``);
- :func:`whatif`: the replay measured as the trace is (``step_time``, ``time_comm``,
  ``time_comm_exposed`` on (scenario, rank, step)), with the identity replay's error in its attrs;
- :func:`fit_network`, :func:`fit_alpha_beta`: latency and bandwidth of the trace's own
  collectives (:mod:`dlexplore.fit.alpha_beta`), which scale the transfers
  (:func:`transfer_ratio`, :mod:`dlexplore.sim.network`);
- :func:`scenario_summary`: one row per scenario (formerly ``summarize``, still accepted with a
  warning: that name is :func:`dlexplore.traces.summarize`'s, a different thing);
- :func:`whatif_report`: the same as text (table, csv, json) for ``dlexplore whatif``.
"""

from ..fit.alpha_beta import AlphaBeta, fit_alpha_beta, fit_network
from .graph import ReplayGraph, build_graph, causal_offsets
from .network import transfer_ratio
from .replay import ReplayResult, Scenario, parse_factor, replay, replay_events
from .report import REPORT_COLUMNS, parse_factors, parse_gpus, whatif_frame, whatif_report
from .whatif import REPLAY_VARIABLES, SUMMARY_VARIABLES, identity_error, scenario_summary, whatif

__all__ = [
    "AlphaBeta",
    "REPLAY_VARIABLES",
    "REPORT_COLUMNS",
    "ReplayGraph",
    "ReplayResult",
    "SUMMARY_VARIABLES",
    "Scenario",
    "build_graph",
    "causal_offsets",
    "fit_alpha_beta",
    "fit_network",
    "identity_error",
    "parse_factor",
    "parse_factors",
    "parse_gpus",
    "replay",
    "replay_events",
    "scenario_summary",
    "transfer_ratio",
    "whatif",
    "whatif_frame",
    "whatif_report",
]


def __getattr__(name: str):
    if name == "summarize":  # the old name of scenario_summary, kept for existing notebooks
        import warnings

        warnings.warn(
            "dlexplore.sim.summarize is now dlexplore.sim.scenario_summary "
            "(dlexplore.traces.summarize is a different thing)",
            DeprecationWarning,
            stacklevel=2,
        )
        return scenario_summary
    raise AttributeError(f"module 'dlexplore.sim' has no attribute {name!r}")
