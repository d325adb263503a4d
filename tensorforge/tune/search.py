"""Evolutionary search of one task's space, guided by the cost model, measured in batches.

Per batch (``TaskSearch.next_batch``):

1. seeds first: the untuned default (the baseline every speedup is measured against) and the
   space's hand-picked starting points, until they have been measured (with
   ``SearchOptions.warm_seeds`` and a trained model, only the default goes first and the seeds
   compete with the population on the model's score: measured worse, so off by default; a warm
   start, ``CostModel.warm`` or configs transferred from similar workloads, ``transfer.py``, puts
   the default first, then the transferred configs (nearest workload first), then the seeds in
   the warm model's order, or the space's when the model learned nothing from other workloads);
2. a population: the best measured configs, mutated, plus fresh random samples; it evolves for a
   few generations *in the model* (children of the best-predicted parents replace the worst), which
   costs no measurement;
3. the batch is the best-predicted unmeasured configs, except that with probability ``epsilon``
   a slot goes to a random valid one (exploration: the model is wrong where it has seen nothing).

Every config is checked by the space before it can be picked (illegal ones are dropped, never
built) and deduplicated by its canonical JSON against everything measured for this task and target
(the database's ``measured_configs``, so a resumed run does not measure anything twice).
``commit`` writes a measured batch to the database in ONE ``add_records`` call: a tune killed
mid-run loses at most the batch in flight.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .measure import Result
from .space import DEFAULT, InvalidCandidate, Space, canonical
from .tasks import Task


@dataclass
class SearchOptions:
    population: int = 48           # configs kept per generation
    generations: int = 3           # rounds of mutation in the model before a batch is picked
    elite: int = 8                 # best measured configs that parent the population
    epsilon: float = 0.15          # share of a batch picked at random among valid configs
    random_share: float = 0.3      # share of each generation that is fresh samples, not children
    max_attempts: int = 2000       # configs tried (valid or not) per batch before giving up
    warm_seeds: bool = False       # True: a trained (warm) model ranks the hand-picked seeds with the rest
                                   # (measured: it lost their diversity, docs/tuning.md "Warm cost model")


@dataclass
class _Candidate:
    config: dict
    key: str
    features: np.ndarray | None
    score: float = 0.0


@dataclass
class TaskSearch:
    """The search state of one task, kept across the scheduler's rounds."""

    task: Task
    space: Space
    model: Any = None                     # a CostModel (or None: analytic order = random)
    measured: set[str] = field(default_factory=set)
    history: list[tuple[float, dict]] = field(default_factory=list)    # (median s, config), ok ones
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    options: SearchOptions = field(default_factory=SearchOptions)
    exhausted: bool = False
    transfer: list[dict] = field(default_factory=list)   # configs that won on similar workloads (transfer.py)
    _feature_cache: dict[str, np.ndarray | None] = field(default_factory=dict, repr=False)

    # ---- state ----------------------------------------------------------------------------------
    @property
    def best(self) -> tuple[float, dict] | None:
        return min(self.history, key=lambda h: h[0]) if self.history else None

    @property
    def best_s(self) -> float:
        b = self.best
        return b[0] if b else math.inf

    def default_s(self) -> float:
        return next((s for s, c in self.history if c.get("kind") == "default"), math.inf)

    def load(self, records) -> None:
        """Takes in earlier records of this task (from the database)."""
        for r in records:
            self.measured.add(canonical(r.config))
            if r.ok:
                self.history.append((r.median_s, r.config))

    # ---- proposing ----------------------------------------------------------------------------
    def _candidate(self, config: dict) -> _Candidate | None:
        key = canonical(config)
        try:
            checked = self.space.check(config)
        except InvalidCandidate:
            return None
        try:
            feats = self.space.features(config, checked)
        except Exception:        # noqa: BLE001 - features are advice; a candidate without them still runs
            feats = None
        return _Candidate(config, key, feats)

    def _score(self, cands: list[_Candidate]) -> None:
        rows = [c for c in cands if c.features is not None]
        if self.model is not None and rows:
            scores = self.model.predict(np.stack([c.features for c in rows]))
            for c, s in zip(rows, scores):
                c.score = float(s)
        for c in cands:
            if c.features is None or self.model is None:
                c.score = self.rng.random() - 1e6        # unknown: after every scored one, in random order

    def next_batch(self, n: int) -> list[dict]:
        """Up to ``n`` unmeasured, valid configs (fewer when the space seems used up)."""
        picked: list[_Candidate] = []
        seen = set(self.measured)
        seeds, ranked_seeds = self.space.seeds(), []
        if self.options.warm_seeds and getattr(self.model, "trained", False):
            # A model that learned from other workloads (warm.py) knows which hand-picked seeds suit
            # this kernel: only the default (the baseline) goes first, the others compete.
            ranked_seeds = [c for c in seeds if c.get("kind") != "default"]
            seeds = [c for c in seeds if c.get("kind") == "default"]
        elif self.transfer or getattr(self.model, "warm", False):
            # What the database knows goes first: after the default, the configs that won on
            # similar workloads, then the hand-picked seeds, each group in the order the model
            # (learned from other workloads) expects to be fastest.
            seeds = self._ordered_seeds([c for c in seeds if canonical(c) not in seen],
                                        [c for c in self.transfer if canonical(c) not in seen])
        for config in seeds:
            if len(picked) >= n:
                return [c.config for c in picked]
            key = canonical(config)
            if key in seen:
                continue
            seen.add(key)
            cand = self._candidate(config)
            if cand is not None:
                picked.append(cand)
        want = n - len(picked)
        if want <= 0:
            return [c.config for c in picked]
        pool = self._evolve(seen)
        keys = {c.key for c in pool}
        extra = [c for c in (self._candidate(x) for x in ranked_seeds) if c is not None and c.key not in keys]
        self._score(extra)
        fresh = [c for c in pool + extra if c.key not in seen]
        if not fresh:
            self.exhausted = not picked
            return [c.config for c in picked]
        fresh.sort(key=lambda c: -c.score)
        chosen: list[_Candidate] = []
        rest = list(fresh)
        while rest and len(chosen) < want:
            i = self.rng.randrange(len(rest)) if self.rng.random() < self.options.epsilon else 0
            chosen.append(rest.pop(i))
        return [c.config for c in picked + chosen]

    def _ordered_seeds(self, seeds: list[dict], transfer: list[dict] = ()) -> list[dict]:
        """The default, then ``transfer`` in its own order (nearest workload first), then the other
        seeds in the warm model's order (the space's without one); a transferred config the space
        rejects is dropped here."""
        default = [c for c in seeds if c.get("kind") == "default"]
        out = list(default)
        taken = {canonical(c) for c in default}
        # the model orders the seeds only when it learned something from other workloads: the
        # roofline alone ranks them worse than the space's hand-picked order (measured on a layer
        # norm: warm runs with roofline-ordered seeds reached 90% of the best at trial 17-33, cold 6-9)
        rank_seeds = bool(getattr(self.model, "warm", False))
        for group, ranked in ((transfer, False), (seeds, rank_seeds)):
            cands = [c for c in (self._candidate(x) for x in group if x.get("kind") != "default")
                     if c is not None and c.key not in taken]
            order = range(len(cands))
            if ranked:
                self._score(cands)
                order = sorted(order, key=lambda i: (-cands[i].score, i))
            for i in order:
                if cands[i].key not in taken:
                    taken.add(cands[i].key)
                    out.append(cands[i].config)
        return out

    def _evolve(self, seen: set[str]) -> list[_Candidate]:
        """A population evolved in the cost model for a few generations (no measurement)."""
        o = self.options
        if self.space.costly:             # a loop candidate is a replayed schedule: keep the pool small
            o = SearchOptions(min(o.population, 16), min(o.generations, 2), o.elite, o.epsilon, o.random_share,
                              min(o.max_attempts, 200))
        parents = [c for _, c in sorted(self.history, key=lambda h: h[0])[:o.elite] if c.get("kind") != "default"]
        if not parents:
            parents = [c for c in self.space.seeds() if c.get("kind") != "default"]
        population: dict[str, _Candidate] = {}
        attempts = 0

        def grow(make: Callable[[], dict]) -> None:
            nonlocal attempts
            attempts += 1
            config = make()
            key = canonical(config)
            if key in population or key in seen:
                return
            cand = self._candidate(config)
            if cand is not None:
                population[key] = cand

        for _ in range(o.generations):
            target = len(population) + o.population
            while len(population) < target and attempts < o.max_attempts:
                if parents and self.rng.random() > o.random_share:
                    grow(lambda: self.space.mutate(self.rng.choice(parents), self.rng))
                else:
                    grow(lambda: self.space.sample(self.rng))
            cands = list(population.values())
            self._score(cands)
            cands.sort(key=lambda c: -c.score)
            keep = cands[:o.population]
            population = {c.key: c for c in keep}
            parents = [c.config for c in keep[:o.elite]] + parents[:max(1, o.elite // 2)]
        return list(population.values())

    # ---- results ------------------------------------------------------------------------------
    def commit(self, results: list[Result], db, target_key: str) -> None:
        """Adds a measured batch to the search state, and to ``db`` as one transaction (with the
        successful records' feature rows, which the warm cost model of later tunes trains on)."""
        for r in results:
            self.measured.add(canonical(r.config))
            if r.ok:
                self.history.append((r.median_s, r.config))
        if db is not None:
            from .features import FEATURE_LAYOUT
            db.add_records([r.record(self.task, target_key) for r in results],
                           features=(FEATURE_LAYOUT, [self._features(r.config) if r.ok else None for r in results]))

    def _features(self, config: dict) -> np.ndarray | None:
        """The feature row of a measured config (computed once: a loop candidate's is a schedule replay)."""
        key = canonical(config)
        if key not in self._feature_cache:
            cand = self._candidate(config)
            self._feature_cache[key] = None if cand is None else cand.features
        return self._feature_cache[key]

    def features_of(self, results: list[Result]) -> tuple[np.ndarray, np.ndarray] | None:
        """Feature rows and seconds of the successful results (for the cost model's update)."""
        rows, secs = [], []
        for r in results:
            if not r.ok:
                continue
            feats = self._features(r.config)
            if feats is None:
                continue
            rows.append(feats)
            secs.append(r.median_s)
        if not rows:
            return None
        return np.stack(rows), np.asarray(secs)


__all__ = ["DEFAULT", "SearchOptions", "TaskSearch"]
