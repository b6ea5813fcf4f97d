"""Steps, samples and epochs to a target accuracy as a function of the global batch size.

**The model** is the empirical one of McCandlish, Kaplan, Amodei et al. (2018), "An Empirical Model
of Large-Batch Training", arXiv:1812.06162, section 2.3: with ``B`` the global batch (samples per
optimizer step, all GPUs together), training to a fixed target takes::

    S(B) = S_min (1 + B_noise / B)        optimizer steps
    E(B) = E_min (1 + B / B_noise)        training samples (examples), E = S B
    E_min = S_min B_noise                 so that both lines hold at once
    (S / S_min - 1) (E / E_min - 1) = 1   the time-compute trade-off of their section 2.3
    B_crit = E_min / S_min                critical batch: twice the minimal steps and samples

Below ``B_noise`` doubling the batch nearly halves the steps (perfect scaling); above it the steps
approach ``S_min`` and extra GPUs buy nothing but samples. McCandlish et al. estimate ``B_noise``
by the *simple noise scale* ``B_simple = tr(Sigma) / |G|^2`` (their section 2.2 and Appendix A;
:func:`simple_noise_scale`, and :mod:`dlexplore.fit.noise_scale` for a user's run).

**Learning-rate rules** (:data:`LR_RULES`): the recipe that makes a large batch train at all. Each is
named with the largest batch its authors report reaching the small-batch accuracy, which is the
*maximum useful batch* this module uses when a workload's parameters give no other bound:

- ``linear``: multiply the learning rate by ``k`` when the batch is multiplied by ``k``, with a
  gradual warm-up from the small-batch rate over the first 5 epochs (Goyal et al. 2017,
  arXiv:1706.02677): ResNet-50 on ImageNet with no loss of accuracy up to 8,192 images.
- ``lars``: layer-wise adaptive rate scaling, each layer's rate times ``||w|| / ||grad w||``
  (You, Gitman & Ginsburg 2017, arXiv:1708.03888): AlexNet to 8K and ResNet-50 to 32K images
  "without loss in accuracy" in the arXiv abstract (the ICLR 2018 submission says 16K for both).
- ``lamb``: the layer-wise trust ratio applied to Adam's update (You et al. 2019, arXiv:1904.00962
  v1, Table 1): BERT-Large pre-training to 32,768 sequences per step at the baseline's SQuAD F1,
  and 65,536/32,768 (two phases) in 8,599 steps.

**Beyond the maximum useful batch** the sources report that accuracy degrades, without a law for
how fast (Goyal et al.: "no loss of accuracy ... up to 8192"; larger batches lose accuracy). This
module models that as stated: a batch above ``max_batch`` does not reach the target
(``reachable`` False, steps NaN). With a fixed budget of epochs as well as the McCandlish
parameters, the model gives its own bound: the target is reached within ``epochs_budget`` only if
``E(B) <= epochs_budget x samples_per_epoch``, i.e. ``B <= B_noise (budget / E_min - 1)``.

**Two kinds of parameters.** With ``s_min`` and ``b_noise`` (fitted to steps-to-target
measurements, or estimated from a run) the steps follow McCandlish's law. With only a budget
(``epochs_budget`` epochs of ``samples_per_epoch``, the published recipe: ResNet-50 for 90 epochs,
BERT-Large for 512 M sequences) the steps are the budget divided by the batch up to ``max_batch``:
the published large-batch results are of that kind, fixed budgets at which the target was met, so
they bound the steps to the target from above rather than measure them.

What this lacks: the noise scale grows as the loss falls (McCandlish et al. section 3), so one
``B_noise`` per target is an average; adaptive batch sizes; the dependence of ``S_min`` on the
learning-rate schedule and its tuning (Shallue et al. 2018 show that disagreements on large batches
come largely from tuning and budgets); how much accuracy is lost beyond ``max_batch``; and
optimizers or models that the published points do not cover.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DlexploreError
from .conventions import PREDICTED_SOURCE

__all__ = [
    "LearningRateRule",
    "LR_RULES",
    "ConvergenceParams",
    "CONVERGENCE_VARIABLES",
    "steps_to_target",
    "samples_to_target",
    "critical_batch",
    "simple_noise_scale",
    "learning_rate",
    "convergence",
    "predict_convergence",
    "finish_convergence",
    "CONVERGENCE_SOURCE",
]

CONVERGENCE_SOURCE = f"{PREDICTED_SOURCE} + large-batch convergence model (McCandlish et al. 2018)"


@dataclass(frozen=True)
class LearningRateRule:
    """How the learning rate follows the batch, and the largest batch its authors validated."""

    name: str
    description: str
    warmup: str
    max_batch: float  # samples per step, all GPUs
    validated_on: str
    source: str


#: The learning-rate rules with their sources (see the module docstring).
LR_RULES: dict[str, LearningRateRule] = {
    "linear": LearningRateRule(
        "linear",
        "lr = lr_ref x B / B_ref (linear scaling rule)",
        "gradual: from lr_ref to lr_ref x B / B_ref, linearly over the first 5 epochs",
        8192,
        "ResNet-50, ImageNet, 90 epochs",
        "Goyal et al. 2017, Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour, "
        "arXiv:1706.02677 (abstract: no loss of accuracy up to 8192 images)",
    ),
    "lars": LearningRateRule(
        "lars",
        "layer-wise rate lr x eta ||w|| / ||grad w|| (Layer-wise Adaptive Rate Scaling)",
        "polynomial warm-up of the global rate",
        32768,
        "ResNet-50, ImageNet (AlexNet to 8192)",
        "You, Gitman & Ginsburg 2017, Large Batch Training of Convolutional Networks, "
        "arXiv:1708.03888 (abstract: AlexNet to 8K, ResNet-50 to 32K without loss in accuracy; "
        "the ICLR 2018 submission states 16K for both)",
    ),
    "lamb": LearningRateRule(
        "lamb",
        "Adam's update scaled per layer by ||w|| / ||update|| (LAMB)",
        "linear warm-up, then polynomial decay",
        32768,
        "BERT-Large pre-training, SQuAD v1.1 F1 (65536/32768 in two phases)",
        "You et al. 2019, Reducing BERT Pre-Training Time from 3 Days to 76 Minutes "
        "(LAMB), arXiv:1904.00962 v1, Table 1",
    ),
}


def _rule(name: str) -> LearningRateRule:
    key = str(name).strip().lower()
    if key not in LR_RULES:
        raise DlexploreError(f"unknown learning-rate rule {name!r}; expected one of {', '.join(LR_RULES)}")
    return LR_RULES[key]


def learning_rate(
    batch: object,
    *,
    base_lr: float,
    base_batch: float,
    rule: str = "linear",
    epoch: object = None,
    warmup_epochs: float = 5.0,
) -> np.ndarray:
    """The peak learning rate of the ``linear`` scaling rule, ``base_lr x batch / base_batch``,
    or during warm-up (``epoch`` < ``warmup_epochs``, Goyal et al.'s gradual warm-up) the rate
    ramped linearly from ``base_lr`` to it. ``lars`` and ``lamb`` scale per layer at run time:
    their global rate is tuned, not derived from the batch, so they raise an error here."""
    if _rule(rule).name != "linear":
        raise DlexploreError(
            f"the {rule} rule sets each layer's rate at run time from its weight "
            "and update norms; only 'linear' gives the rate from the batch"
        )
    b = np.asarray(batch, dtype=float)
    if np.any(b <= 0) or base_batch <= 0 or base_lr <= 0:
        raise DlexploreError("batch, base_batch and base_lr must be > 0")
    peak = base_lr * b / base_batch
    if epoch is None:
        return peak
    e = np.asarray(epoch, dtype=float)
    ramp = np.clip(e / warmup_epochs, 0.0, 1.0) if warmup_epochs > 0 else 1.0
    return base_lr + (peak - base_lr) * ramp


@dataclass(frozen=True)
class ConvergenceParams:
    """How many steps a workload needs to reach a target, and up to which batch.

    ``s_min`` (steps) and ``b_noise`` (samples) give McCandlish's law; ``epochs_budget`` with
    ``samples_per_epoch`` the published fixed budget; ``max_batch`` (samples per step) the largest
    batch at which the target is reached (from ``rule`` when not given). Standard errors are NaN
    when unknown. ``source`` says where each number comes from.
    """

    workload: str = "custom"
    target: str = ""
    samples_per_epoch: float = float("nan")
    s_min: float = float("nan")
    b_noise: float = float("nan")
    s_min_stderr: float = float("nan")
    b_noise_stderr: float = float("nan")
    epochs_budget: float = float("nan")
    samples_budget: float = float("nan")
    max_batch: float = float("nan")
    rule: str = "linear"
    source: str = ""
    notes: str = ""
    extra: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _rule(self.rule)
        for name in ("samples_per_epoch", "s_min", "b_noise", "epochs_budget", "samples_budget", "max_batch"):
            value = float(getattr(self, name))
            if not np.isnan(value) and not (np.isfinite(value) and value > 0):
                raise DlexploreError(f"{name} must be > 0 (or NaN, unknown), got {value!r}")
        has_law = not (np.isnan(self.s_min) or np.isnan(self.b_noise))
        if np.isnan(self.s_min) != np.isnan(self.b_noise):
            raise DlexploreError("give both s_min (steps) and b_noise (samples), or neither")
        if not has_law and np.isnan(self.budget_samples):
            raise DlexploreError(
                "convergence parameters need s_min and b_noise (McCandlish et al.), or a fixed "
                "training budget: epochs_budget with samples_per_epoch, or samples_budget"
            )

    @property
    def e_min(self) -> float:
        """Minimal training samples to the target, ``S_min x B_noise``."""
        return self.s_min * self.b_noise

    @property
    def budget_samples(self) -> float:
        """The budget in samples: ``samples_budget``, else ``epochs_budget x samples_per_epoch``
        (NaN without one)."""
        if not np.isnan(self.samples_budget):
            return float(self.samples_budget)
        return float(self.epochs_budget * self.samples_per_epoch)

    @property
    def useful_batch(self) -> float:
        """The largest batch that reaches the target: ``max_batch`` (else the rule's), capped by
        the McCandlish bound ``B_noise (budget / E_min - 1)`` when both are known."""
        bound = self.max_batch if not np.isnan(self.max_batch) else _rule(self.rule).max_batch
        if not np.isnan(self.e_min) and not np.isnan(self.budget_samples):
            ratio = self.budget_samples / self.e_min - 1.0
            bound = min(bound, self.b_noise * ratio) if ratio > 0 else 0.0
        return float(bound)

    def with_(self, **changes: Any) -> ConvergenceParams:
        """A copy with some fields changed (checked again)."""
        return replace(self, **changes)


def convergence(params: ConvergenceParams | str | Mapping[str, object]) -> ConvergenceParams:
    """Parameters from a catalog workload name, a mapping of fields, or parameters as they are."""
    if isinstance(params, ConvergenceParams):
        return params
    if isinstance(params, str):
        from ..catalog.convergence import convergence_entry

        row = convergence_entry(params)
        fields = {k: v for k, v in row.items() if k in ConvergenceParams.__dataclass_fields__}
        fields["workload"] = row["name"]
        fields["rule"] = row["rule"] or "linear"
        return ConvergenceParams(**fields)  # type: ignore[arg-type]
    if isinstance(params, Mapping):
        unknown = sorted(set(params) - set(ConvergenceParams.__dataclass_fields__))
        if unknown:
            raise DlexploreError(
                f"unknown convergence parameter(s) {unknown}; expected some of "
                f"{sorted(ConvergenceParams.__dataclass_fields__)}"
            )
        return ConvergenceParams(**params)  # type: ignore[arg-type]
    raise DlexploreError(
        f"expected convergence parameters, a workload name or a mapping, got {type(params).__name__}"
    )


def critical_batch(s_min: float, e_min: float) -> float:
    """``B_crit = E_min / S_min`` (samples): the batch that takes twice the minimal steps and
    twice the minimal samples (McCandlish et al. 2018, section 2.3)."""
    if not (s_min > 0 and e_min > 0):
        raise DlexploreError("s_min and e_min must be > 0")
    return e_min / s_min


def steps_to_target(batch: object, s_min: float, b_noise: float) -> np.ndarray:
    """``S(B) = S_min (1 + B_noise / B)`` optimizer steps at global batch ``B`` (samples)."""
    b = np.asarray(batch, dtype=float)
    if np.any(~(b > 0)):
        raise DlexploreError(f"batch must be > 0 samples, got {b.ravel().tolist()}")
    return s_min * (1.0 + b_noise / b)


def samples_to_target(batch: object, s_min: float, b_noise: float) -> np.ndarray:
    """``E(B) = E_min (1 + B / B_noise)`` training samples at global batch ``B``."""
    b = np.asarray(batch, dtype=float)
    return s_min * b_noise * (1.0 + b / b_noise)


def simple_noise_scale(
    b_small: float, sq_norm_small: object, b_big: float, sq_norm_big: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The simple noise scale of McCandlish et al. (2018), Appendix A.1.

    From squared gradient norms ``|G_B|^2`` measured on batches of ``b_small`` and ``b_big``
    samples (``E|G_B|^2 = |G|^2 + tr(Sigma) / B``), the unbiased estimates::

        |G|^2    = (b_big |G_big|^2 - b_small |G_small|^2) / (b_big - b_small)
        tr(Sigma) = (|G_small|^2 - |G_big|^2) / (1 / b_small - 1 / b_big)

    Returns ``(g2, trace_sigma, b_simple)`` with ``b_simple = trace_sigma / g2`` (samples), on the
    inputs' shape. Each of ``g2`` and ``trace_sigma`` is unbiased; their ratio is not, so average
    each over many steps before dividing (as :func:`dlexplore.fit.noise_scale_from_gradients`
    does) rather than averaging per-step ratios.
    """
    if not (0 < b_small < b_big):
        raise DlexploreError(f"need 0 < b_small < b_big samples, got {b_small!r} and {b_big!r}")
    small = np.asarray(sq_norm_small, dtype=float)
    big = np.asarray(sq_norm_big, dtype=float)
    g2 = (b_big * big - b_small * small) / (b_big - b_small)
    trace = (small - big) / (1.0 / b_small - 1.0 / b_big)
    with np.errstate(divide="ignore", invalid="ignore"):
        return g2, trace, trace / g2


#: Units and long names of what :func:`predict_convergence` and time to accuracy write.
CONVERGENCE_VARIABLES: dict[str, tuple[str, str]] = {
    "global_batch": ("samples", "global batch (samples per optimizer step, all GPUs)"),
    "steps_to_target": ("count", "optimizer steps to reach the target"),
    "samples_to_target": ("samples", "training samples to reach the target"),
    "epochs_to_target": ("1", "epochs to reach the target"),
    "reachable": ("1", "whether the batch reaches the target (at most the maximum useful batch)"),
    "time_to_target": ("s", "time to accuracy: steps to the target x step time"),
    "energy_to_target": ("J", "energy to accuracy: steps to the target x energy per step"),
    "fastest": ("1", "the configuration that reaches the target soonest"),
    "speedup_per_doubling": ("1", "time to target at half the GPUs / time to target here"),
}


def predict_convergence(global_batch: object, params: ConvergenceParams | str | Mapping) -> xr.Dataset:
    """Steps, samples and epochs to the target at each global batch (samples per step).

    ``global_batch`` is a number, a sequence (a ``global_batch`` dimension) or a DataArray (its
    dimensions are kept, e.g. ``gpus x batch_size``). Returns ``steps_to_target`` (count),
    ``samples_to_target`` (samples), ``epochs_to_target`` (NaN without ``samples_per_epoch``)
    and ``reachable`` (bool); unreachable batches have NaN steps.
    """
    p = convergence(params)
    if isinstance(global_batch, xr.DataArray):
        b = global_batch.astype(float)
    else:
        values = np.asarray(global_batch, dtype=float)
        b = (
            xr.DataArray(values, dims="global_batch", coords={"global_batch": values})
            if values.ndim
            else xr.DataArray(values)
        )
    if np.any(~(b.values > 0)):
        raise DlexploreError(f"global batch must be > 0 samples, got {b.values.ravel().tolist()}")
    if np.isnan(p.s_min):
        steps = p.budget_samples / b
    else:
        steps = p.s_min * (1.0 + p.b_noise / b)
    reachable = b <= p.useful_batch * (1 + 1e-12)
    steps = steps.where(reachable)
    samples = steps * b
    ds = xr.Dataset(
        {
            "steps_to_target": steps,
            "samples_to_target": samples,
            "epochs_to_target": samples / p.samples_per_epoch,
            "reachable": reachable,
        }
    )
    if "global_batch" not in ds.coords:
        ds = ds.assign_coords(global_batch=b)
    return finish_convergence(ds, p)


def finish_convergence(ds: xr.Dataset, params: ConvergenceParams) -> xr.Dataset:
    """Units, long names, the parameters in attrs, and a predicted source."""
    for name, variable in ds.variables.items():  # not ds[name]: each would gather every coordinate
        if name in CONVERGENCE_VARIABLES:
            units, long_name = CONVERGENCE_VARIABLES[name]
            variable.attrs.update(units=units, long_name=long_name)
    ds.attrs.update(
        source=CONVERGENCE_SOURCE,
        kind="predicted",
        convergence_workload=params.workload,
        convergence_target=params.target,
        convergence_rule=params.rule,
        convergence_source=params.source,
        s_min=params.s_min,
        b_noise=params.b_noise,
        epochs_budget=params.epochs_budget,
        samples_per_epoch=params.samples_per_epoch,
        max_useful_batch=params.useful_batch,
    )
    return ds
