"""A tuning job's search as an Optuna study: its parameter ranges as Optuna's distributions, its
strategy as a sampler (and Hyperband's pruner), seeded by ``RandomSeed``.

- ``Random``: Optuna's RandomSampler.
- ``Bayesian``: Optuna's TPESampler (multivariate where there is one definition), after a few random
  trials (:func:`startup_trials`).
- ``Grid``: Optuna's GridSampler over the categorical values: every combination once.
- ``Hyperband``: TPESampler with Optuna's HyperbandPruner, its resource the objective's steps (each
  value the trial prints is one step), within ``HyperbandStrategyConfig``'s MinResource and MaxResource.

Scaling: ``Linear`` (and ``Auto``) samples uniformly, ``Logarithmic`` uniformly in the logarithm,
``ReverseLogarithmic`` uniformly in the logarithm of 1 - x (values close to 1 more often).
Several definitions: the definition is one more categorical parameter, and each definition's
parameters are named ``<definition>:<name>`` in the study.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import Trial, TrialState

from ..jobs import tuning

DEFINITION = "TrainingJobDefinitionName"

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass(frozen=True)
class Parameter:
    key: str  # its name in the study
    name: str  # the hyperparameter's
    kind: str  # IntegerParameterRanges, ContinuousParameterRanges or CategoricalParameterRanges
    distribution: BaseDistribution
    reverse: bool = False  # ReverseLogarithmic: the study holds 1 - x

    def suggest(self, trial: Trial) -> str:
        given = self.distribution
        found: Any
        if isinstance(given, CategoricalDistribution):
            found = trial.suggest_categorical(self.key, given.choices)
        elif isinstance(given, IntDistribution):
            found = trial.suggest_int(self.key, given.low, given.high, log=given.log)
        else:
            assert isinstance(given, FloatDistribution)
            found = trial.suggest_float(self.key, given.low, given.high, log=given.log)
        return tuning.format_value(self.kind, 1.0 - found if self.reverse else found)

    def internal(self, text: str) -> Any | None:
        """A hyperparameter's string as the study holds it; None when it lies outside the range."""
        try:
            if self.kind == "CategoricalParameterRanges":
                return text if text in self.distribution.choices else None  # type: ignore[attr-defined]
            value: float = int(text) if self.kind == "IntegerParameterRanges" else float(text)
        except ValueError:
            return None
        if self.reverse:
            value = 1.0 - value
        low, high = self.distribution.low, self.distribution.high  # type: ignore[attr-defined]
        return value if low <= value <= high else None


def parameters(doc: Mapping[str, Any], definition: Mapping[str, Any], prefix: str = "") -> list[Parameter]:
    found = []
    for kind, entries in tuning.ranges(doc, definition).items():
        for entry in entries:
            key = prefix + entry["Name"]
            if kind == "CategoricalParameterRanges":
                found.append(Parameter(key, entry["Name"], kind, CategoricalDistribution(entry["Values"])))
                continue
            low, high = tuning.bounds(kind, entry)
            scaling = entry.get("ScalingType", "Auto")
            if kind == "IntegerParameterRanges":
                distribution: BaseDistribution = IntDistribution(int(low), int(high), log=scaling == "Logarithmic")
                found.append(Parameter(key, entry["Name"], kind, distribution))
            elif scaling == "ReverseLogarithmic":
                found.append(Parameter(key, entry["Name"], kind, FloatDistribution(1.0 - high, 1.0 - low, log=True),
                                       reverse=True))
            else:
                found.append(Parameter(key, entry["Name"], kind,
                                       FloatDistribution(low, high, log=scaling == "Logarithmic")))
    return found


def startup_trials(doc: Mapping[str, Any]) -> int:
    """Random trials before the Bayesian sampler models the objective: a quarter of the trials,
    from 3 to 10."""
    return min(10, max(3, tuning.max_trials(doc) // 4))


class _Grid(optuna.samplers.GridSampler):
    """Optuna's GridSampler, asked and told by hand: once the grid is visited, it would stop
    ``study.optimize``'s loop, which the tuner does not run (it asks :meth:`Search.exhausted`)."""

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        return None


class Search:
    """The study of one tuning job: what to try next, and what each try gave."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        config = doc["HyperParameterTuningJobConfig"]
        definitions = tuning.definitions(doc)
        self.several = "TrainingJobDefinitions" in doc
        self.spaces = {(d["DefinitionName"] if self.several else None): parameters(
            doc, d, f"{d['DefinitionName']}:" if self.several else "") for d in definitions}
        self.minimize = tuning.objective(doc, definitions[0])["Type"] == "Minimize"
        seed = config.get("RandomSeed")
        strategy = config["Strategy"]
        pruner: optuna.pruners.BasePruner = optuna.pruners.NopPruner()
        sampler: optuna.samplers.BaseSampler
        if strategy == "Random":
            sampler = optuna.samplers.RandomSampler(seed=seed)
        elif strategy == "Grid":
            (space,) = self.spaces.values()
            sampler = _Grid({p.key: list(p.distribution.choices) for p in space}, seed=seed)  # type: ignore[attr-defined]
        else:
            sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials(doc),
                                                 multivariate=not self.several, constant_liar=True)
        if strategy == "Hyperband":
            hyperband = config.get("StrategyConfig", {}).get("HyperbandStrategyConfig", {})
            pruner = optuna.pruners.HyperbandPruner(min_resource=hyperband.get("MinResource", 1),
                                                    max_resource=hyperband.get("MaxResource", "auto"))
        self.max_resource: int | None = (config.get("StrategyConfig", {}).get("HyperbandStrategyConfig", {})
                                         .get("MaxResource") if strategy == "Hyperband" else None)
        self.pruning = strategy == "Hyperband"
        self.study = optuna.create_study(direction="minimize" if self.minimize else "maximize", sampler=sampler,
                                         pruner=pruner)

    def ask(self) -> tuple[Trial, str | None, dict[str, str]]:
        """The next trial: its study trial, its definition's name (several definitions) and its
        tuned hyperparameters as strings."""
        trial = self.study.ask()
        definition = trial.suggest_categorical(DEFINITION, list(self.spaces)) if self.several else None
        return trial, definition, {p.name: p.suggest(trial) for p in self.spaces[definition]}

    def exhausted(self) -> bool:
        """Whether a Grid has visited every combination."""
        sampler = self.study.sampler
        return isinstance(sampler, optuna.samplers.GridSampler) and sampler.is_exhausted(self.study)

    def report(self, trial: Trial, curve: Sequence[float], reported: int) -> bool:
        """The objective's new values (``curve`` beyond the first ``reported``) as the trial's
        steps; whether Hyperband stops the trial now."""
        for step in range(reported, len(curve)):
            trial.report(curve[step], step + 1)
        if not self.pruning or len(curve) == reported:
            return False
        return trial.should_prune() or (self.max_resource is not None and len(curve) >= self.max_resource)

    def tell(self, trial: Trial, value: float | None, stopped_early: bool) -> None:
        if stopped_early:
            self.study.tell(trial, state=TrialState.PRUNED)
        elif value is None:
            self.study.tell(trial, state=TrialState.FAIL)
        else:
            self.study.tell(trial, value)

    def warm_start(self, summaries: Sequence[Mapping[str, Any]]) -> int:
        """Parents' trials with an objective added to the study, where every tuned value lies in
        this search's ranges; how many were."""
        added = 0
        for summary in summaries:
            metric = summary.get("FinalHyperParameterTuningJobObjectiveMetric")
            definition = summary.get(DEFINITION) if self.several else None
            if metric is None or definition not in self.spaces:
                continue
            tuned = summary["TunedHyperParameters"]
            params: dict[str, Any] = {DEFINITION: definition} if self.several else {}
            distributions: dict[str, BaseDistribution] = (
                {DEFINITION: CategoricalDistribution(list(self.spaces))} if self.several else {})
            for parameter in self.spaces[definition]:
                value = parameter.internal(tuned[parameter.name]) if parameter.name in tuned else None
                if value is None:
                    break
                params[parameter.key], distributions[parameter.key] = value, parameter.distribution
            else:
                self.study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions,
                                                               value=float(metric["Value"])))
                added += 1
        return added
