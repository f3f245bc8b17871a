"""Run-or-skip recommendation from per-input profiles.

After Javed, Singh, Reger and Toor, "To test, or not to test: A proactive
approach for deciding complete performance test initiation" (2022), written for
a web service at CERN (CMS).

When a performance suite's inputs keep growing, profiling every input on every
code update is too slow. Instead:

1. cluster the inputs by the program behaviour they cause (:class:`InputClustering`);
2. on a code update, profile a seeded sample of each cluster (:func:`sample_inputs`);
3. judge each sampled input against itself on the old code: its paired change
   with a confidence interval (:func:`paired_change`, :func:`judge_change`);
4. decide per cluster, then for the suite (:class:`RunOrSkipRecommender`).
   The paper's own Algorithms 1 and 2 (:func:`time_threshold`, :func:`decide`)
   remain as the recommender's ``rule="paper"``.

Everything here is pure and deterministic: arrays and profiles in, results
with ``to_dict()`` out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import binom, norm
from scipy.stats import t as t_distribution
from sklearn.base import BaseEstimator
from sklearn.cluster import DBSCAN, AgglomerativeClustering, KMeans
from sklearn.metrics import silhouette_score
from sklearn.mixture import GaussianMixture
from sklearn.neighbors import NearestNeighbors

from perfwatch.detectors.input_attributes import (
    ATTRIBUTES,
    CLUSTER_ATTRIBUTES,
    METHODS,
    NOISE,
    RULES,
    Method,
    Rule,
    Scaling,
    TimeAttribute,
)


class Profile(Protocol):
    """An input's profile as the recommender reads it: its id, and each of ATTRIBUTES
    by name (``perfwatch.contract.models.InputProfile`` is one)."""

    @property
    def input_id(self) -> str: ...

    @property
    def statements(self) -> float: ...


def attribute_matrix(profiles: Sequence[Profile], attributes: Sequence[str]) -> np.ndarray:
    """Rows = profiles, columns = attributes, as floats."""
    _check_attributes(attributes)
    return np.array(
        [[float(getattr(p, name)) for name in attributes] for p in profiles], dtype=float
    ).reshape(len(profiles), len(attributes))


def input_table(
    profiles: Sequence[Profile], attributes: Sequence[str] = CLUSTER_ATTRIBUTES
) -> tuple[np.ndarray, list[str]]:
    """What :meth:`InputClustering.fit` takes from profiles: their attribute rows and ids."""
    return attribute_matrix(profiles, attributes), [p.input_id for p in profiles]


def _check_attributes(attributes: Sequence[str]) -> None:
    unknown = [name for name in attributes if name not in ATTRIBUTES]
    if unknown:
        raise ValueError(f"unknown attribute {unknown[0]!r}; known: {', '.join(ATTRIBUTES)}")


def knee_index(values: Sequence[float] | np.ndarray) -> int:
    """Index of the knee of a convex curve: the point farthest below the chord.

    Both axes are scaled to [0, 1] and the chord joins the first and the last
    point, so the rule works for a rising curve (sorted k-distances) and a
    falling one (k-means inertia against k) alike.
    """
    y = np.asarray(values, dtype=float)
    if y.size < 3:
        return 0
    span = y.max() - y.min()
    if span == 0:
        return 0
    scaled = (y - y.min()) / span
    x = np.linspace(0.0, 1.0, y.size)
    chord = scaled[0] + (scaled[-1] - scaled[0]) * x
    return int(np.argmax(chord - scaled))


@dataclass(frozen=True)
class Cluster:
    """One group of inputs; ``label`` NOISE (-1) is DBSCAN's group of noise inputs."""

    label: int
    members: tuple[str, ...]
    centre: dict[str, float]

    @property
    def name(self) -> str:
        return "noise" if self.label == NOISE else f"cluster {self.label}"

    @property
    def size(self) -> int:
        return len(self.members)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "name": self.name,
            "size": self.size,
            "centre": self.centre,
            "members": list(self.members),
        }


@dataclass(frozen=True)
class ClusterUpdate:
    """What :meth:`InputClustering.update` did with arriving inputs."""

    assigned: dict[str, int]
    misfits: list[str]
    replaced: list[str]
    refitted: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "assigned": self.assigned,
            "misfits": self.misfits,
            "replaced": self.replaced,
            "refitted": self.refitted,
            "reason": self.reason,
        }


class InputClustering(BaseEstimator):
    """Cluster inputs on scaled profile attributes.

    With ``scaling="auto"`` an attribute spanning more than ``LOG_SPAN`` (its
    largest value over its smallest positive one) is taken on a log scale;
    every attribute is then standardised.

    ``fit(X, ids)``: X has one row per input and one column per name in
    ``attributes`` (:func:`input_table` makes both from profiles).  Clusters
    are numbered by ascending mean ``statements`` (the first attribute when
    statements are not among them).

    Methods: ``dbscan`` (default; ``eps``, when not given, the best-scoring of
    the knee of the sorted k-distances and some of their quantiles, see
    :func:`_chosen_eps`; noise inputs kept as their own group),
    ``kmeans`` (k by the elbow of inertia), ``gmm`` (k by the lowest BIC) and
    ``agglomerative`` (Ward; k with the highest silhouette).
    ``n_clusters`` fixes k for the last three.

    Fitted attributes: ``labels_`` (input id -> cluster label), ``clusters_``
    (:class:`Cluster` list), ``attribute_rows_`` (input id -> its attribute
    row), ``log_offset_`` (per attribute, c of log(x + c), NaN when linear),
    ``mean_`` and ``scale_`` (the standardisation), ``selection_`` (how the
    number of clusters or DBSCAN's radius was chosen), ``silhouette_`` (mean
    silhouette of the clustered inputs; None with fewer than two clusters).

    Arriving inputs (:meth:`update`) are assigned to a cluster: with DBSCAN,
    to that of the nearest core input if it lies within ``eps``, else to
    noise; otherwise to the nearest cluster centre if it lies within that
    cluster's radius (its farthest member's distance at fit time). An input
    outside every cluster is a misfit. Once more than ``max_misfit_share`` of
    the inputs added since the last fit are misfits, the clustering is redone
    on all inputs.
    """

    def __init__(
        self,
        method: Method = "dbscan",
        *,
        attributes: Sequence[str] = CLUSTER_ATTRIBUTES,
        eps: float | None = None,
        min_samples: int | None = None,
        n_clusters: int | None = None,
        max_clusters: int = 10,
        random_state: int = 0,
        max_misfit_share: float = 0.1,
        scaling: Scaling = "auto",
    ) -> None:
        self.method = method
        self.scaling = scaling
        self.attributes = attributes
        self.eps = eps
        self.min_samples = min_samples
        self.n_clusters = n_clusters
        self.max_clusters = max_clusters
        self.random_state = random_state
        self.max_misfit_share = max_misfit_share

    # -- fitting -------------------------------------------------------------------------------

    def fit(self, X: ArrayLike, ids: Sequence[str] | None = None) -> InputClustering:
        """Cluster the inputs: rows of X, named by ids (default "0", "1", ...)."""
        raw, names = self._named_rows(X, ids)
        self._check_parameters(names)
        order = sorted(range(len(names)), key=names.__getitem__)
        raw = raw[order]
        ordered = [names[i] for i in order]
        self.attribute_rows_: dict[str, np.ndarray] = dict(zip(ordered, raw, strict=True))
        self.log_offset_ = (
            _log_offsets(raw) if self.scaling == "auto" else np.full(raw.shape[1], np.nan)
        )
        shaped = self._shape(raw)
        self.mean_ = shaped.mean(axis=0)
        scale = shaped.std(axis=0)
        self.scale_ = np.where(scale > 0, scale, 1.0)
        points = self._standardise(raw)
        labels, self.selection_ = self._cluster(points)
        self.silhouette_ = _silhouette(points, labels)
        labels = _relabel_by_mean(labels, raw[:, self._ordering_column()])
        self.labels_: dict[str, int] = {
            input_id: int(label) for input_id, label in zip(ordered, labels, strict=True)
        }
        self._fit_assignment(points, labels)
        self._added_since_fit = 0
        self._misfits_since_fit = 0
        self._rebuild_clusters()
        return self

    def _rows(self, X: ArrayLike) -> np.ndarray:
        _check_attributes(self.attributes)
        raw = np.asarray(X, dtype=float)
        if raw.ndim != 2 or raw.shape[1] != len(self.attributes):
            raise ValueError(
                f"X must have one row per input and {len(self.attributes)} columns "
                f"({', '.join(self.attributes)}), got shape {raw.shape}"
            )
        return raw

    def _named_rows(self, X: ArrayLike, ids: Sequence[str] | None) -> tuple[np.ndarray, list[str]]:
        raw = self._rows(X)
        names = [str(i) for i in range(raw.shape[0])] if ids is None else list(ids)
        if len(names) != raw.shape[0]:
            raise ValueError(f"{len(names)} ids for {raw.shape[0]} rows of X")
        return raw, names

    def _ordering_column(self) -> int:
        return list(self.attributes).index("statements") if "statements" in self.attributes else 0

    def _check_parameters(self, ids: Sequence[str]) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown clustering method {self.method!r}; use one of {METHODS}")
        if not ids:
            raise ValueError("no input profiles to cluster")
        if len(set(ids)) != len(ids):
            repeated = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"input id {repeated!r} appears more than once")
        if not self.attributes:
            raise ValueError("no attributes to cluster on")
        if self.eps is not None and self.eps <= 0:
            raise ValueError(f"eps must be positive, got {self.eps}")
        if self.min_samples is not None and self.min_samples < 1:
            raise ValueError(f"min_samples must be at least 1, got {self.min_samples}")
        if self.n_clusters is not None and not 1 <= self.n_clusters <= len(ids):
            raise ValueError(
                f"n_clusters must be between 1 and the number of inputs ({len(ids)}), "
                f"got {self.n_clusters}"
            )
        if self.max_clusters < 1:
            raise ValueError(f"max_clusters must be at least 1, got {self.max_clusters}")
        if self.scaling not in ("auto", "linear"):
            raise ValueError(f"scaling must be 'auto' or 'linear', got {self.scaling!r}")
        if not 0 <= self.max_misfit_share <= 1:
            raise ValueError(f"max_misfit_share must be in [0, 1], got {self.max_misfit_share}")

    def _shape(self, raw: np.ndarray) -> np.ndarray:
        """Columns spanning orders of magnitude on a log scale (see :func:`_log_offsets`)."""
        logged = ~np.isnan(self.log_offset_)
        shaped = raw.copy()
        offsets = self.log_offset_[logged]
        shaped[:, logged] = np.log(np.maximum(raw[:, logged], 0.0) + offsets)
        return shaped

    def _standardise(self, raw: np.ndarray) -> np.ndarray:
        return (self._shape(raw) - self.mean_) / self.scale_

    def _cluster(self, points: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        n = len(points)
        if self.method == "dbscan":
            return self._dbscan(points)
        if n == 1:
            return np.zeros(1, dtype=int), {"n_clusters": 1, "rule": "a single input"}
        largest = min(self.max_clusters, n)
        if self.method == "kmeans":
            k, rule = self.n_clusters, "given"
            if k is None:
                inertias = [self._kmeans(points, k).inertia_ for k in range(1, largest + 1)]
                k, rule = knee_index(inertias) + 1, "elbow of k-means inertia"
            return self._kmeans(points, k).labels_, {"n_clusters": k, "rule": rule}
        if self.method == "gmm":
            k, rule = self.n_clusters, "given"
            if k is None:
                bics = [self._gmm(points, k).bic(points) for k in range(1, largest + 1)]
                k, rule = int(np.argmin(bics)) + 1, "lowest BIC"
            return self._gmm(points, k).predict(points), {"n_clusters": k, "rule": rule}
        k, rule = self.n_clusters, "given"
        if k is None:
            k, rule = _best_silhouette(points, largest), "highest silhouette"
        model = AgglomerativeClustering(n_clusters=k, linkage="ward").fit(points)
        return model.labels_, {"n_clusters": k, "rule": rule}

    def _kmeans(self, points: np.ndarray, k: int) -> KMeans:
        return KMeans(n_clusters=k, n_init=10, random_state=self.random_state).fit(points)

    def _gmm(self, points: np.ndarray, k: int) -> GaussianMixture:
        return GaussianMixture(
            n_components=k, covariance_type="full", random_state=self.random_state
        ).fit(points)

    def _dbscan(self, points: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        n, dims = points.shape
        # Twice the dimensions (Sander et al.), but small suites keep room for several clusters.
        min_samples = self.min_samples or max(2, min(2 * dims, n // 10))
        min_samples = min(min_samples, n)
        if self.eps is not None:
            labels = DBSCAN(eps=self.eps, min_samples=min_samples).fit_predict(points)
            return labels, {"eps": self.eps, "eps_rule": "given", "min_samples": min_samples}
        eps, rule, labels = _chosen_eps(points, min_samples)
        return labels, {"eps": eps, "eps_rule": rule, "min_samples": min_samples}

    def _fit_assignment(self, points: np.ndarray, labels: np.ndarray) -> None:
        if self.method == "dbscan":
            eps = float(self.selection_["eps"])
            neighbours = NearestNeighbors(radius=eps).fit(points)
            counts = np.array([len(r) for r in neighbours.radius_neighbors(points)[1]])
            core = (counts >= int(self.selection_["min_samples"])) & (labels != NOISE)
            self._core_points = points[core]
            self._core_labels = labels[core]
            return
        groups = sorted(set(labels.tolist()))
        self._centres = np.array([points[labels == g].mean(axis=0) for g in groups])
        self._centre_labels = np.array(groups)
        self._radii = np.array(
            [
                np.linalg.norm(points[labels == g] - centre, axis=1).max()
                for g, centre in zip(groups, self._centres, strict=True)
            ]
        )

    # -- assignment and growth -----------------------------------------------------------------

    def predict(self, X: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Cluster labels of (new) inputs, rows of X, and whether each lies inside its
        cluster."""
        raw = np.asarray(X, dtype=float)
        if raw.size == 0:
            return np.zeros(0, dtype=int), np.zeros(0, dtype=bool)
        points = self._standardise(self._rows(raw))
        if self.method == "dbscan":
            if len(self._core_points) == 0:
                return np.full(len(points), NOISE), np.zeros(len(points), dtype=bool)
            distance, index = (
                NearestNeighbors(n_neighbors=1).fit(self._core_points).kneighbors(points)
            )
            inside = distance[:, 0] <= float(self.selection_["eps"])
            labels = np.where(inside, self._core_labels[index[:, 0]], NOISE)
            return labels, inside
        distances = np.linalg.norm(points[:, None, :] - self._centres[None, :, :], axis=2)
        nearest = distances.argmin(axis=1)
        inside = distances[np.arange(len(points)), nearest] <= self._radii[nearest]
        return self._centre_labels[nearest], inside

    def update(self, X: ArrayLike, ids: Sequence[str]) -> ClusterUpdate:
        """Add arriving inputs (rows of X, named by ids); an input already known keeps
        its label and takes the new row.  Refits when too many of them do not fit (see
        the class doc)."""
        raw, arriving = self._named_rows(X, ids)
        replaced = [i for i in arriving if i in self.attribute_rows_]
        new = [k for k, i in enumerate(arriving) if i not in self.attribute_rows_]
        new_ids = [arriving[k] for k in new]
        for input_id, row in zip(arriving, raw, strict=True):
            self.attribute_rows_[input_id] = row
        labels, inside = self.predict(raw[new])
        misfits = [i for i, fits in zip(new_ids, inside, strict=True) if not fits]
        self._added_since_fit += len(new)
        self._misfits_since_fit += len(misfits)
        share = self._misfits_since_fit / self._added_since_fit if self._added_since_fit else 0.0
        if share > self.max_misfit_share:
            reason = (
                f"{self._misfits_since_fit} of {self._added_since_fit} inputs added since the "
                f"last fit ({share:.0%}) lie outside every cluster, more than "
                f"{self.max_misfit_share:.0%}: clustering redone on all "
                f"{len(self.attribute_rows_)} inputs"
            )
            self.fit(np.array(list(self.attribute_rows_.values())), list(self.attribute_rows_))
            assigned = {i: self.labels_[i] for i in new_ids}
            return ClusterUpdate(assigned, misfits, replaced, True, reason)
        assigned = {i: int(label) for i, label in zip(new_ids, labels, strict=True)}
        self.labels_.update(assigned)
        self._rebuild_clusters()
        reason = (
            f"{self._misfits_since_fit} of {self._added_since_fit} inputs added since the last "
            f"fit ({share:.0%}) lie outside every cluster, at most "
            f"{self.max_misfit_share:.0%}: clusters kept"
        )
        return ClusterUpdate(assigned, misfits, replaced, False, reason)

    def _rebuild_clusters(self) -> None:
        by_label: dict[int, list[str]] = {}
        for input_id in sorted(self.labels_):
            by_label.setdefault(self.labels_[input_id], []).append(input_id)
        order = sorted(by_label, key=lambda label: (label == NOISE, label))
        self.clusters_: list[Cluster] = [
            Cluster(
                label=label,
                members=tuple(by_label[label]),
                centre={
                    name: float(value)
                    for name, value in zip(
                        self.attributes,
                        np.array([self.attribute_rows_[i] for i in by_label[label]]).mean(axis=0),
                        strict=True,
                    )
                },
            )
            for label in order
        ]

    # -- inspection ----------------------------------------------------------------------------

    def cluster(self, label: int) -> Cluster:
        for cluster in self.clusters_:
            if cluster.label == label:
                return cluster
        raise KeyError(f"no cluster labelled {label}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "attributes": list(self.attributes),
            "parameters": _plain(self.selection_),
            "scaling": self.scaling,
            "log_scaled": [
                name
                for name, offset in zip(self.attributes, self.log_offset_, strict=True)
                if not np.isnan(offset)
            ],
            "silhouette": self.silhouette_,
            "inputs": len(self.labels_),
            "clusters": [c.to_dict() for c in self.clusters_],
        }


def _knee_eps(points: np.ndarray, min_samples: int) -> float:
    """DBSCAN ``eps`` at the knee of the sorted distances to the min_samples-th neighbour."""
    if len(points) < 2:
        return 1.0
    neighbours = NearestNeighbors(n_neighbors=max(2, min_samples)).fit(points)
    distances = np.sort(neighbours.kneighbors(points)[0][:, -1])
    eps = float(distances[knee_index(distances)])
    if eps > 0:
        return eps
    positive = distances[distances > 0]
    # All inputs behave identically: any positive radius makes one cluster.
    return float(positive.min()) if positive.size else 1.0


# Candidate DBSCAN radii: the knee and these quantiles of the sorted k-distances.
EPS_QUANTILES = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
# A radius that leaves more inputs than this as noise describes the suite poorly.
MAX_NOISE_SHARE = 0.25
# A column is taken on a log scale when its largest value exceeds its smallest positive
# one this many times: sizes and counts of real suites span orders of magnitude, and on a
# linear scale the few largest inputs squeeze all others into one dense cluster.
LOG_SPAN = 100.0


def _log_offsets(raw: np.ndarray) -> np.ndarray:
    """Per column: the offset c of log(x + c) (its smallest positive value), or NaN for a
    column kept linear (negative values, nothing positive, or a span under LOG_SPAN)."""
    offsets = np.full(raw.shape[1], np.nan)
    for column in range(raw.shape[1]):
        values = raw[:, column]
        positive = values[values > 0]
        if (values < 0).any() or positive.size == 0:
            continue
        if values.max() / positive.min() > LOG_SPAN:
            offsets[column] = positive.min()
    return offsets


def _chosen_eps(points: np.ndarray, min_samples: int) -> tuple[float, str, np.ndarray]:
    """DBSCAN's radius from the data: among the knee of the sorted k-distances and a few
    of their quantiles, the one with the best :func:`_density_score`; the knee when none
    forms two clusters."""
    knee = _knee_eps(points, min_samples)
    knee_labels = DBSCAN(eps=knee, min_samples=min_samples).fit_predict(points)
    best = (knee, "knee of the sorted k-distances", knee_labels)
    if len(points) <= min_samples:
        return best
    neighbours = NearestNeighbors(n_neighbors=max(2, min_samples)).fit(points)
    distances = np.sort(neighbours.kneighbors(points)[0][:, -1])
    best_score = _density_score(points, knee_labels)
    for eps in sorted({float(np.quantile(distances, q)) for q in EPS_QUANTILES}):
        if eps <= 0:
            continue
        labels = DBSCAN(eps=eps, min_samples=min_samples).fit_predict(points)
        score = _density_score(points, labels)
        if score is not None and (best_score is None or score > best_score + 1e-9):
            best, best_score = (eps, "best silhouette among k-distance quantiles", labels), score
    return best


def _density_score(points: np.ndarray, labels: np.ndarray) -> float | None:
    """Silhouette of the clustered inputs times their share: a radius does not score by
    leaving the hard inputs as noise. None with fewer than two clusters or too much noise."""
    noise_share = float(np.mean(labels == NOISE))
    score = _silhouette(points, labels)
    if score is None or noise_share > MAX_NOISE_SHARE:
        return None
    return score * (1 - noise_share)


def _silhouette(points: np.ndarray, labels: np.ndarray) -> float | None:
    """Mean silhouette of the clustered (non-noise) inputs; None with fewer than two clusters."""
    clustered = labels != NOISE
    groups = set(labels[clustered].tolist())
    if len(groups) < 2 or clustered.sum() <= len(groups):
        return None
    return float(silhouette_score(points[clustered], labels[clustered]))


def _best_silhouette(points: np.ndarray, largest: int) -> int:
    """Number of Ward clusters with the highest mean silhouette (1 when nothing splits)."""
    best_k, best_score = 1, -1.0
    for k in range(2, min(largest, len(points) - 1) + 1):
        labels = AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(points)
        score = float(silhouette_score(points, labels))
        if score > best_score:
            best_k, best_score = k, score
    return best_k


def _relabel_by_mean(labels: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Number clusters by ascending mean of ``values`` (executed statements), so names
    read in order."""
    groups = sorted(
        (g for g in set(labels.tolist()) if g != NOISE),
        key=lambda g: (values[labels == g].mean(), g),
    )
    mapping = {old: new for new, old in enumerate(groups)} | {NOISE: NOISE}
    return np.array([mapping[g] for g in labels.tolist()], dtype=int)


def _plain(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in values.items()}


# -- sampling -----------------------------------------------------------------------------------


def sample_inputs(
    clustering: InputClustering, *, per_cluster: int = 3, seed: int = 0
) -> dict[int, list[str]]:
    """Seeded random sample of input ids from every cluster (noise included).

    Each cluster's members are shuffled once by the seed and the first
    ``per_cluster`` taken, so a larger sample with the same seed contains the
    smaller one and the inputs already profiled are reused.
    """
    if per_cluster < 1:
        raise ValueError(f"per_cluster must be at least 1, got {per_cluster}")
    rng = np.random.default_rng(seed)
    sample: dict[int, list[str]] = {}
    for cluster in clustering.clusters_:
        order = rng.permutation(cluster.size)
        sample[cluster.label] = [cluster.members[i] for i in order[:per_cluster]]
    return sample


# -- the paper's Algorithms 2 and 1 -------------------------------------------------------------

ThresholdCase = Literal[
    "equal_statements", "between_neighbours", "beyond_upper_edge", "beyond_lower_edge"
]


@dataclass(frozen=True)
class Threshold:
    """Algorithm 2's time threshold for one updated input in its cluster."""

    value: float
    case: ThresholdCase
    below_statements: float | None
    above_statements: float | None

    def describe(self) -> str:
        match self.case:
            case "equal_statements":
                return (
                    f"largest time of inputs with the same {self.below_statements:.0f} statements"
                )
            case "between_neighbours":
                return (
                    f"midpoint of the largest times of the nearest inputs below "
                    f"({self.below_statements:.0f} statements) and above "
                    f"({self.above_statements:.0f} statements)"
                )
            case "beyond_upper_edge":
                return (
                    f"beyond the cluster's upper edge: largest time of the nearest inputs "
                    f"below ({self.below_statements:.0f} statements)"
                )
            case _:
                return (
                    f"beyond the cluster's lower edge: largest time of the nearest inputs "
                    f"above ({self.above_statements:.0f} statements)"
                )


def time_threshold(
    statements: np.ndarray | Sequence[float],
    times: np.ndarray | Sequence[float],
    updated_statements: float,
) -> Threshold:
    """Algorithm 2 (cluster data point evaluation) for one updated input.

    ``statements`` and ``times`` are the baseline profiles of the input's
    cluster. The threshold is the largest time among inputs with the same
    statement count; with none equal, the midpoint of the largest times of the
    nearest inputs above and below in statement count; beyond the cluster's
    edge, the largest time of the nearest inputs on the one side there is.
    """
    s = np.asarray(statements, dtype=float)
    t = np.asarray(times, dtype=float)
    if s.size == 0 or s.shape != t.shape:
        raise ValueError("a cluster needs at least one input, with one time per statement count")
    equal = s == updated_statements
    if equal.any():
        return Threshold(float(t[equal].max()), "equal_statements", updated_statements, None)
    below, above = s[s < updated_statements], s[s > updated_statements]
    nearest_below = float(below.max()) if below.size else None
    nearest_above = float(above.min()) if above.size else None
    time_below = float(t[s == nearest_below].max()) if nearest_below is not None else None
    time_above = float(t[s == nearest_above].max()) if nearest_above is not None else None
    if time_below is not None and time_above is not None:
        return Threshold(
            (time_below + time_above) / 2, "between_neighbours", nearest_below, nearest_above
        )
    if time_below is not None:
        return Threshold(time_below, "beyond_upper_edge", nearest_below, None)
    assert time_above is not None
    return Threshold(time_above, "beyond_lower_edge", None, nearest_above)


@dataclass(frozen=True)
class Decision:
    """Algorithm 1's outcome: ``gradient_check`` is None when it was not needed or possible."""

    run: bool
    time_check: bool
    gradient_check: bool | None
    gradient_before: float | None
    gradient_after: float | None
    gradient_change: float | None


def gradient_change(
    previous_time: float, previous_statements: float, time: float, statements: float
) -> tuple[float, float, float] | None:
    """Slopes statements/time before and after, and the relative drop between them.

    None when a slope is undefined (no time or no statements).
    """
    if min(previous_time, time) <= 0 or min(previous_statements, statements) <= 0:
        return None
    before = previous_statements / previous_time
    after = statements / time
    return before, after, (before - after) / before


def decide(
    time: float,
    statements: float,
    threshold: float,
    *,
    previous_time: float | None,
    previous_statements: float | None,
    acceptable_slowdown: float = 0.38,
    time_tolerance: float = 0.0,
) -> Decision:
    """Algorithm 1 (decision to perform testing) for one updated input.

    Run when the time exceeds the threshold (raised by ``time_tolerance``, a
    share of it, to absorb timing noise; 0 is the paper's rule); otherwise run
    when the slope statements/time of the same input fell by more than
    ``acceptable_slowdown`` from before the update to after it.
    """
    if time > threshold * (1 + time_tolerance):
        return Decision(True, True, None, None, None, None)
    if previous_time is None or previous_statements is None:
        return Decision(False, False, None, None, None, None)
    slopes = gradient_change(previous_time, previous_statements, time, statements)
    if slopes is None:
        return Decision(False, False, None, None, None, None)
    change = slopes[2]
    return Decision(change > acceptable_slowdown, False, change > acceptable_slowdown, *slopes)


# -- the paired comparison ----------------------------------------------------------------------

ChangeMethod = Literal["paired_rounds", "paired_passes", "unpaired_passes", "minima"]


@dataclass(frozen=True)
class PairedChange:
    """How much slower (positive) or faster (negative) one input got: new / old - 1.

    ``low`` and ``high`` bound it with the recommender's confidence; None when the
    timings are too few for an interval (``method`` "minima": only the minimum times).
    """

    estimate: float
    low: float | None
    high: float | None
    method: ChangeMethod
    passes: int

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def describe(self) -> str:
        text = f"{self.estimate:+.1%}"
        if self.low is not None and self.high is not None:
            text += f" [{self.low:+.1%}, {self.high:+.1%}]"
        match self.method:
            case "paired_rounds":
                return f"{text} over {self.passes} alternating rounds"
            case "paired_passes":
                return f"{text} over {self.passes} paired passes"
            case "unpaired_passes":
                return f"{text} from {self.passes} passes each, not paired"
            case _:
                return f"{text} from the minimum times, no interval"

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "method": self.method,
            "passes": self.passes,
        }


def paired_change(
    old: Sequence[float],
    new: Sequence[float],
    *,
    paired: bool,
    confidence: float = 0.95,
    rounds: int | None = None,
) -> PairedChange:
    """The relative change from ``old`` to ``new`` timings of one input, with an interval.

    Paired in ``rounds`` (the passes form that many equal rounds, each version's
    round in a process of its own, the versions alternating pass by pass): the
    process is the unit that repeats, so each round gives one log ratio, the
    median of its paired passes' (:func:`round_logs`), and the interval is
    Student's t over the rounds.
    Paired pass by pass (alternated in one process, pass i of one next to pass
    i of the other): the median of the per-pass ratios new/old, with the sign
    test's distribution-free interval for a median; a burst of load that hits
    one pair moves one ratio, not the estimate. Not paired (the old times
    measured at another time): the Hodges-Lehmann shift of the log times with
    the Mann-Whitney interval. Fewer than two passes on either side: the ratio
    of the minima, no interval.
    """
    before = np.asarray(old, dtype=float)
    after = np.asarray(new, dtype=float)
    if before.size == 0 or after.size == 0 or (before <= 0).any() or (after <= 0).any():
        raise ValueError("timings must be positive, at least one per version")
    alpha = 1 - confidence
    if min(before.size, after.size) < 2:
        return PairedChange(float(after.min() / before.min() - 1), None, None, "minima", 1)
    if paired and rounds is not None and rounds >= 2 and before.size == after.size:
        if before.size % rounds:
            raise ValueError(f"{before.size} timings do not form {rounds} equal rounds")
        return round_change(round_logs(before, after, rounds)[None, :], confidence)
    if paired and before.size == after.size:
        logs = np.sort(np.log(after) - np.log(before))
        n = logs.size
        # the largest k with P(B <= k - 1) <= alpha / 2, B ~ Binomial(n, 1/2)
        k = int(binom.ppf(alpha / 2, n, 0.5))
        if binom.cdf(k, n, 0.5) <= alpha / 2:
            k += 1
        bounds = (logs[k - 1], logs[n - k]) if k >= 1 else None
        return _change(float(np.median(logs)), bounds, "paired_passes", n)
    differences = np.sort((np.log(after)[:, None] - np.log(before)[None, :]).ravel())
    count = differences.size
    spread = math.sqrt(before.size * after.size * (before.size + after.size + 1) / 12)
    k = math.floor(count / 2 - float(norm.ppf(1 - alpha / 2)) * spread)
    bounds = (differences[k - 1], differences[count - k]) if k >= 1 else None
    passes = min(before.size, after.size)
    return _change(float(np.median(differences)), bounds, "unpaired_passes", passes)


def round_logs(old: np.ndarray, new: np.ndarray, rounds: int) -> np.ndarray:
    """Per round: the median over its passes of log new / old, pass i of one version with
    pass i of the other (timed moments apart, so a change of load reaches both). Two
    copies of the same code varied half as much from round to round by this as by the
    ratio of the versions' fastest passes: one lucky pass moves a minimum, not a median."""
    logs = np.log(np.asarray(new, dtype=float)) - np.log(np.asarray(old, dtype=float))
    return np.median(logs.reshape(rounds, -1), axis=1)


def round_change(logs: np.ndarray, confidence: float) -> PairedChange:
    """The change from per-round log ratios (rows: inputs, columns: rounds; the inputs of a
    round averaged first, since they shared its processes): mean with Student's t interval."""
    per_round = np.asarray(logs, dtype=float).mean(axis=0)
    count = per_round.size
    mean = float(per_round.mean())
    half = (
        float(t_distribution.ppf(1 - (1 - confidence) / 2, count - 1))
        * float(per_round.std(ddof=1))
        / math.sqrt(count)
    )
    return _change(mean, (mean - half, mean + half), "paired_rounds", count)


def _change(
    log_estimate: float, log_bounds: tuple[float, float] | None, method: ChangeMethod, passes: int
) -> PairedChange:
    if log_bounds is None:
        return PairedChange(math.expm1(log_estimate), None, None, method, passes)
    low, high = log_bounds
    return PairedChange(
        math.expm1(log_estimate), math.expm1(float(low)), math.expm1(float(high)), method, passes
    )


Verdict = Literal["slower", "faster", "unchanged"]


def judge_change(
    change: PairedChange, acceptable_slowdown: float, noise_allowance: float
) -> tuple[Verdict, str]:
    """Slower, faster or unchanged, and why.

    Slower: the estimate exceeds the acceptable slow-down and the whole interval
    lies above half of it, so neither noise nor a negligible change can make it
    (every cluster's inputs are judged, and any one can run the suite); faster
    likewise below. Without an interval the estimate must clear the acceptable
    slow-down raised by ``noise_allowance``.
    """
    limit = f"the acceptable {acceptable_slowdown:.0%}"
    if change.low is None or change.high is None:
        bar = (1 + acceptable_slowdown) * (1 + noise_allowance) - 1
        if change.estimate > bar:
            return "slower", f"slower beyond {limit} and the noise allowance ({bar:.0%})"
        if change.estimate < -bar:
            return "faster", f"faster beyond {limit} and the noise allowance ({bar:.0%})"
        return "unchanged", f"within {limit} and the noise allowance ({bar:.0%})"
    margin = acceptable_slowdown / 2
    if change.estimate > acceptable_slowdown and change.low > margin:
        return "slower", f"slower beyond {limit}, the interval above {margin:.1%}"
    if change.estimate < -acceptable_slowdown and change.high < -margin:
        return "faster", f"faster beyond {limit}, the interval below -{margin:.1%}"
    if abs(change.estimate) > acceptable_slowdown:
        return "unchanged", f"beyond {limit} but the interval reaches within {margin:.1%}: noise"
    if change.low > 0:
        return "unchanged", f"slower, but within {limit}"
    return "unchanged", f"within {limit}"


# -- the recommendation -------------------------------------------------------------------------


@dataclass(frozen=True)
class Vote:
    """One sampled input's vote, its reason and the numbers behind it.

    Under the paired rule ``change`` holds the input's paired change and
    ``verdict`` what it says; ``time_check`` is then whether it voted run.
    """

    input_id: str
    group: int
    label: str
    run: bool
    time_check: bool
    gradient_check: bool | None
    reason: str
    numbers: dict[str, float | str | None]
    change: PairedChange | None = None
    verdict: Verdict | None = None

    @property
    def decision(self) -> str:
        return "run" if self.run else "skip"

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "input_id": self.input_id,
            "group": self.group,
            "label": self.label,
            "decision": self.decision,
            "time_check": self.time_check,
            "gradient_check": self.gradient_check,
            "reason": self.reason,
            "numbers": self.numbers,
        }
        if self.change is not None:
            document["change"] = self.change.to_dict()
            document["verdict"] = self.verdict
        return document


@dataclass(frozen=True)
class ClusterJudgement:
    """One cluster's decision under the paired rule: run when any of its judged inputs is
    slower beyond the acceptable slow-down with confidence (a cluster can hold kinds of
    input its attributes do not tell apart, and a slowdown of one kind must not be
    outvoted by the others)."""

    label: int
    name: str
    size: int
    votes: list[Vote]
    change: PairedChange | None

    @property
    def run_votes(self) -> int:
        return sum(vote.run for vote in self.votes)

    @property
    def decision(self) -> str:
        return "run" if self.run_votes else "skip"

    @property
    def verdict(self) -> Verdict:
        if self.decision == "run":
            return "slower"
        faster = sum(vote.verdict == "faster" for vote in self.votes)
        return "faster" if self.votes and 2 * faster > len(self.votes) else "unchanged"

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "name": self.name,
            "size": self.size,
            "judged": len(self.votes),
            "run_votes": self.run_votes,
            "decision": self.decision,
            "verdict": self.verdict,
            "change": None if self.change is None else self.change.to_dict(),
            "inputs": [vote.input_id for vote in self.votes],
        }


# Inputs named as the ones that drove a decision.
DRIVERS = 3


@dataclass(frozen=True)
class Recommendation:
    """Run or skip the full performance suite, with every vote.

    ``rule`` "paired" (default): run when any cluster runs (its sampled inputs
    slower with confidence); "paper": run when at least half of all votes say
    run (the paper's pooled vote).
    """

    votes: list[Vote]
    parameters: dict[str, Any]
    drift: float | None
    close_band: tuple[float, float]
    per_cluster: int
    outside_inputs: list[str] = field(default_factory=list)
    rule: str = "paper"
    clusters: list[ClusterJudgement] = field(default_factory=list)

    @property
    def run_votes(self) -> int:
        return sum(vote.run for vote in self.votes)

    @property
    def run_share(self) -> float:
        return self.run_votes / len(self.votes) if self.votes else 0.0

    @property
    def decision(self) -> str:
        if self.rule == "paired":
            return "run" if any(c.decision == "run" for c in self.clusters) else "skip"
        # A tie runs the suite: a missed slowdown costs more than a needless run.
        return "run" if self.votes and self.run_share >= 0.5 else "skip"

    @property
    def faster(self) -> bool:
        """Paired rule: every judged cluster got faster."""
        judged = [c for c in self.clusters if c.votes]
        return bool(judged) and all(c.verdict == "faster" for c in judged)

    @property
    def drivers(self) -> list[Vote]:
        """The few inputs behind the decision: the largest slow-downs that voted run, or,
        for a skip, the largest changes either way."""
        if self.decision == "run":
            chosen = [vote for vote in self.votes if vote.run]
        else:
            chosen = [vote for vote in self.votes if vote.change is not None]
        return sorted(chosen, key=lambda vote: -abs(_estimate(vote)))[:DRIVERS]

    @property
    def close(self) -> bool:
        """Paired rule: a skip although some input looked slower than acceptable, its
        interval too wide to tell; paper rule: a run share within the close band."""
        if self.rule == "paired":
            acceptable = float(self.parameters["acceptable_slowdown"])
            return self.decision == "skip" and any(
                vote.verdict == "unchanged"
                and vote.change is not None
                and vote.change.has_interval
                and vote.change.estimate > acceptable
                for vote in self.votes
            )
        low, high = self.close_band
        return bool(self.votes) and low <= self.run_share <= high

    @property
    def advice(self) -> dict[str, Any] | None:
        if not self.close:
            return None
        larger = 2 * self.per_cluster
        share = (
            "an input looked slower than acceptable, its interval too wide to tell"
            if self.rule == "paired"
            else f"the vote is close ({self.run_share:.0%} run)"
        )
        return {
            "message": (
                f"{share}: profile a larger sample, {larger} inputs per cluster with the same "
                "seed, and decide again"
            ),
            "per_cluster": larger,
        }

    def summary(self) -> str:
        """One line that leads with the decision."""
        if self.rule != "paired":
            return (
                f"{self.decision.upper()}: {self.run_votes} of {len(self.votes)} sampled inputs "
                f"vote run ({self.run_share:.0%})"
            )
        slower = [c for c in self.clusters if c.decision == "run"]
        if slower:
            names = ", ".join(f"{c.name} ({_describe(c.change)})" for c in slower if c.votes)
            return (
                f"RUN: slower with confidence in {len(slower)} of {len(self.clusters)} "
                f"clusters: {names}"
            )
        if self.faster:
            return "SKIP: the update is faster in every cluster"
        return (
            "SKIP: no cluster is slower beyond the acceptable slow-down "
            f"({len(self.clusters)} judged)"
        )

    def seed_table(self) -> str:
        """The votes laid out as the paper's Tables I and II (x: gradient check not needed)."""
        labels = [vote.label for vote in self.votes]
        time_row = [str(vote.time_check) for vote in self.votes]
        gradient_row = [
            "x" if vote.gradient_check is None else str(vote.gradient_check) for vote in self.votes
        ]
        first = "Slower" if self.rule == "paired" else "Timethreshold"
        rows = [["Checks", *labels], [first, *time_row]]
        if self.rule != "paired":
            rows.append(["Gradient", *gradient_row])
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        return "\n".join(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows
        )

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "decision": self.decision,
            "run_share": self.run_share,
            "run_votes": self.run_votes,
            "votes_total": len(self.votes),
            "close": self.close,
            "advice": self.advice,
            "drift": self.drift,
            "parameters": self.parameters,
            "outside_inputs": self.outside_inputs,
            "votes": [vote.to_dict() for vote in self.votes],
            "rule": self.rule,
            "summary": self.summary(),
        }
        if self.rule == "paired":
            document["faster"] = self.faster
            document["clusters"] = [c.to_dict() for c in self.clusters]
            document["drivers"] = [vote.input_id for vote in self.drivers]
        return document


def _estimate(vote: Vote) -> float:
    return vote.change.estimate if vote.change is not None else 0.0


def _describe(change: PairedChange | None) -> str:
    return "no paired change" if change is None else change.describe()


class RunOrSkipRecommender(BaseEstimator):
    """Judge sampled inputs of a code update against the clustered baseline.

    ``rule="paired"`` (default): every sampled input is compared with itself on
    the old code (the ``reference`` profiles measured alternately with the
    update, else its baseline profile) through its repeated timings
    (:func:`paired_change`). It votes run when it is slower by more than
    ``acceptable_slowdown`` (default 5%) with the interval (``confidence``)
    above no change. Each cluster decides by its own votes (run when any says
    run) and the suite runs when any cluster does, so a slowdown confined to
    one kind of input is not outvoted by the others. The clusters
    only place inputs, so a patch that adds statements cannot excuse itself.
    ``time_tolerance`` is the noise allowance of inputs without repeated
    timings.

    ``rule="paper"``: the paper's Algorithms 1 and 2 as written: a time
    threshold from the cluster's baseline inputs of similar statement counts
    (raised by ``time_tolerance``), then the slope statements/time, whose drop
    beyond ``acceptable_slowdown`` (the paper: 38%, a 1.61-fold time) votes run;
    the suite runs when half of all votes do. With a ``reference``, the
    thresholds are scaled by each input's drift (reference / baseline time).
    """

    def __init__(
        self,
        *,
        rule: Rule = "paired",
        acceptable_slowdown: float = 0.05,
        confidence: float = 0.95,
        time_tolerance: float = 0.10,
        time_attribute: TimeAttribute = "cpu_time_s",
        close_band: tuple[float, float] = (0.45, 0.55),
    ) -> None:
        self.rule = rule
        self.acceptable_slowdown = acceptable_slowdown
        self.confidence = confidence
        self.time_tolerance = time_tolerance
        self.time_attribute = time_attribute
        self.close_band = close_band

    def recommend(
        self,
        clustering: InputClustering,
        baseline: Iterable[Profile],
        update: Sequence[Profile],
        *,
        reference: Sequence[Profile] | None = None,
        per_cluster: int = 3,
    ) -> Recommendation:
        """Judge the update's sampled inputs; ``baseline`` holds the profiles of the
        inputs the clustering knows, ``clustering`` the clusters fitted on them."""
        self._check_parameters()
        if not update:
            raise ValueError("the update holds no input profiles")
        baseline_by_id = {p.input_id: p for p in baseline}
        reference_by_id = {p.input_id: p for p in reference or ()}
        drifts = self._drifts(baseline_by_id, reference_by_id)
        drift = float(np.median(list(drifts.values()))) if drifts else None
        known = [p for p in update if p.input_id in clustering.labels_]
        unknown = [p for p in update if p.input_id not in clustering.labels_]
        groups = {p.input_id: clustering.labels_[p.input_id] for p in known}
        predicted, inside = clustering.predict(attribute_matrix(unknown, clustering.attributes))
        groups |= {
            p.input_id: int(g) for p, g, ok in zip(unknown, predicted, inside, strict=True) if ok
        }
        # A new input outside every cluster has no baseline to be judged against.
        outside = sorted(p.input_id for p, ok in zip(unknown, inside, strict=True) if not ok)
        group_order = [c.label for c in clustering.clusters_]
        votes: list[Vote] = []
        judgements: list[ClusterJudgement] = []
        for label in group_order:
            cluster = clustering.cluster(label)
            in_group = sorted(
                (p for p in update if groups.get(p.input_id) == label), key=lambda p: p.input_id
            )
            cluster_votes = []
            for position, profile in enumerate(in_group, start=1):
                previous = reference_by_id.get(profile.input_id) or baseline_by_id.get(
                    profile.input_id
                )
                name = _vote_label(group_order.index(label) + 1, label, position)
                if self.rule == "paired":
                    vote = self._paired_vote(
                        profile, previous, label, name, profile.input_id in reference_by_id
                    )
                else:
                    members = [baseline_by_id[i] for i in cluster.members]
                    vote = self._vote(
                        profile,
                        previous,
                        label=label,
                        name=name,
                        threshold=time_threshold(
                            np.array([p.statements for p in members], dtype=float),
                            np.array([self._time(p) for p in members], dtype=float),
                            profile.statements,
                        ),
                        drift=drifts.get(profile.input_id, drift),
                        alternated=profile.input_id in reference_by_id,
                    )
                cluster_votes.append(vote)
            votes += cluster_votes
            if self.rule == "paired":
                pooled = self._pooled_change(cluster_votes, in_group, reference_by_id)
                judgements.append(
                    ClusterJudgement(label, cluster.name, cluster.size, cluster_votes, pooled)
                )
        return Recommendation(
            votes=votes,
            parameters={
                "rule": self.rule,
                "acceptable_slowdown": self.acceptable_slowdown,
                "confidence": self.confidence,
                "time_tolerance": self.time_tolerance,
                "time_attribute": self.time_attribute,
                "close_band": list(self.close_band),
            },
            drift=drift,
            close_band=self.close_band,
            per_cluster=per_cluster,
            outside_inputs=outside,
            rule=self.rule,
            clusters=judgements,
        )

    def _check_parameters(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {self.rule!r}")
        if self.acceptable_slowdown < 0:
            raise ValueError(
                f"acceptable_slowdown must be 0 or more, got {self.acceptable_slowdown}"
            )
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must lie between 0 and 1, got {self.confidence}")
        if self.time_tolerance < 0:
            raise ValueError(f"time_tolerance must be 0 or more, got {self.time_tolerance}")
        if self.time_attribute not in ("cpu_time_s", "wall_time_s"):
            raise ValueError(
                f"time_attribute must be cpu_time_s or wall_time_s, got {self.time_attribute!r}"
            )
        low, high = self.close_band
        if not 0 <= low <= high <= 1:
            raise ValueError(f"close_band must satisfy 0 <= low <= high <= 1, got {low}, {high}")

    def _time(self, profile: Profile) -> float:
        return float(getattr(profile, self.time_attribute))

    def _times(self, profile: Profile) -> list[float]:
        """Every timing pass of the profile, or its minimum when it kept none."""
        passes = getattr(profile, self.time_attribute.replace("_time_s", "_times_s"), None)
        return list(passes) if passes else [self._time(profile)]

    def _drifts(
        self, baseline: Mapping[str, Profile], reference: Mapping[str, Profile]
    ) -> dict[str, float]:
        """Per input: its time on the old code now over its time in the baseline."""
        return {
            input_id: self._time(profile) / self._time(baseline[input_id])
            for input_id, profile in reference.items()
            if input_id in baseline and self._time(baseline[input_id]) > 0
        }

    def _paired_change(
        self, previous: Profile, profile: Profile, paired: bool
    ) -> PairedChange | None:
        old, new = self._times(previous), self._times(profile)
        if min(old + new) <= 0:
            return None
        return paired_change(
            old,
            new,
            paired=paired,
            confidence=self.confidence,
            rounds=_shared_rounds(previous, profile) if paired else None,
        )

    def _paired_vote(
        self, profile: Profile, previous: Profile | None, label: int, name: str, alternated: bool
    ) -> Vote:
        numbers: dict[str, float | str | None] = {
            "time_s": self._time(profile),
            "statements": float(profile.statements),
            "previous_time_s": None if previous is None else self._time(previous),
            "previous_statements": None if previous is None else float(previous.statements),
            "previous_source": _previous_source(previous, alternated),
            "time_change": None
            if previous is None
            else _relative(self._time(profile), self._time(previous)),
            "statement_change": None
            if previous is None
            else _relative(float(profile.statements), float(previous.statements)),
        }
        change = None if previous is None else self._paired_change(previous, profile, alternated)
        if change is None:
            why = "no earlier profile of this input" if previous is None else "a time of 0"
            return Vote(
                profile.input_id, label, name, False, False, None, f"not judged: {why}", numbers
            )
        verdict, why = judge_change(change, self.acceptable_slowdown, self.time_tolerance)
        numbers |= {
            "change": change.estimate,
            "change_low": change.low,
            "change_high": change.high,
            "change_method": change.method,
        }
        source = "the reference" if alternated else "the baseline"
        reason = f"{self.time_attribute} {change.describe()} against {source}: {why}"
        run = verdict == "slower"
        return Vote(profile.input_id, label, name, run, run, None, reason, numbers, change, verdict)

    def _pooled_change(
        self,
        votes: Sequence[Vote],
        profiles: Sequence[Profile],
        reference: Mapping[str, Profile],
    ) -> PairedChange | None:
        """The cluster's change: every judged input's paired passes pooled (each input
        compared with itself, so sizes do not mix), else the median input estimate."""
        changes = [vote.change for vote in votes if vote.change is not None]
        if not changes:
            return None
        by_id = {p.input_id: p for p in profiles}
        if len({c.passes for c in changes}) == 1 and all(
            c.method == "paired_rounds" for c in changes
        ):
            logs = [
                round_logs(
                    np.array(self._times(reference[vote.input_id])),
                    np.array(self._times(by_id[vote.input_id])),
                    changes[0].passes,
                )
                for vote in votes
                if vote.change is not None
            ]
            return round_change(np.array(logs), self.confidence)
        if all(c.method == "paired_passes" for c in changes):
            old: list[float] = []
            new: list[float] = []
            for vote in votes:
                if vote.change is not None:
                    old += self._times(reference[vote.input_id])
                    new += self._times(by_id[vote.input_id])
            return paired_change(old, new, paired=True, confidence=self.confidence)
        estimate = float(np.median([c.estimate for c in changes]))
        return PairedChange(estimate, None, None, "minima", len(changes))

    def _vote(
        self,
        profile: Profile,
        previous: Profile | None,
        *,
        label: int,
        name: str,
        threshold: Threshold,
        drift: float | None,
        alternated: bool,
    ) -> Vote:
        time = self._time(profile)
        scaled = threshold.value * (drift or 1.0)
        previous_time = self._time(previous) if previous is not None else None
        previous_statements = float(previous.statements) if previous is not None else None
        decision = decide(
            time,
            float(profile.statements),
            scaled,
            previous_time=previous_time,
            previous_statements=previous_statements,
            acceptable_slowdown=self.acceptable_slowdown,
            time_tolerance=self.time_tolerance,
        )
        limit = scaled * (1 + self.time_tolerance)
        numbers: dict[str, float | str | None] = {
            "time_s": time,
            "statements": float(profile.statements),
            "threshold_s": threshold.value,
            "threshold_case": threshold.case,
            "drift": drift,
            "limit_s": limit,
            "previous_time_s": previous_time,
            "previous_statements": previous_statements,
            "previous_source": _previous_source(previous, alternated),
            "time_change": _relative(time, previous_time),
            "statement_change": _relative(float(profile.statements), previous_statements),
            "gradient_before": decision.gradient_before,
            "gradient_after": decision.gradient_after,
            "gradient_change": decision.gradient_change,
        }
        return Vote(
            input_id=profile.input_id,
            group=label,
            label=name,
            run=decision.run,
            time_check=decision.time_check,
            gradient_check=decision.gradient_check,
            reason=self._reason(decision, time, limit, threshold, previous is None),
            numbers=numbers,
        )

    def _reason(
        self,
        decision: Decision,
        time: float,
        limit: float,
        threshold: Threshold,
        no_previous: bool,
    ) -> str:
        time_text = (
            f"time {time:.4g} s {'>' if decision.time_check else '<='} limit {limit:.4g} s "
            f"({threshold.describe()})"
        )
        if decision.time_check:
            return time_text
        if decision.gradient_change is None:
            why = "no earlier profile of this input" if no_previous else "a slope is undefined"
            return f"{time_text}; gradient check not possible: {why}"
        change = decision.gradient_change
        movement = f"fell {change:.1%}" if change >= 0 else f"rose {-change:.1%}"
        verdict = "more than" if decision.gradient_check else "within"
        return (
            f"{time_text}; slope statements/time {movement}, {verdict} the acceptable "
            f"{self.acceptable_slowdown:.0%}"
        )


def _shared_rounds(previous: Profile, profile: Profile) -> int | None:
    """The rounds both profiles' passes form, when they were timed in the same rounds."""
    rounds = getattr(profile, "timing_rounds", None)
    return rounds if rounds and rounds == getattr(previous, "timing_rounds", None) else None


def _previous_source(previous: Profile | None, alternated: bool) -> str | None:
    """Where the old code's time came from: profiled beside the update, or the baseline."""
    if previous is None:
        return None
    return "reference" if alternated else "baseline"


def _vote_label(group_number: int, label: int, position: int) -> str:
    """C<cluster><input> as in the paper's tables; CN for the noise group."""
    group = "N" if label == NOISE else str(group_number)
    separator = "" if position < 10 and len(group) == 1 else "."
    return f"C{group}{separator}{position}"


def _relative(value: float, previous: float | None) -> float | None:
    if previous is None or previous == 0 or not math.isfinite(previous):
        return None
    return value / previous - 1
