"""Descriptive statistics and correlations (numpy only; the tests hold them equal to scipy's).

Undefined values are `None` (JSON null), never NaN: a correlation with fewer than two pairs or a
constant side, a standard deviation of fewer than two values, any statistic of no values. Missing
values (None or NaN, e.g. an unscorable final return) are dropped; for correlations, pairwise.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np

__all__ = ["clean", "describe", "pearson", "spearman", "rankdata", "ecdf", "paired"]


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def clean(values: Iterable[Any]) -> np.ndarray:
    """The non-missing values as a float64 array."""
    return np.asarray([float(v) for v in values if not _is_missing(v)], dtype=np.float64)


def describe(values: Iterable[Any]) -> dict[str, Any]:
    """Count, mean, median, sample standard deviation (ddof=1), min and max.

    Args:
        values: numbers; None/NaN are dropped.

    Returns:
        `{n, mean, median, std, min, max}`; statistics of no values are None, `std` of one value is None.
    """
    arr = clean(values)
    n = int(arr.size)
    if n == 0:
        return {"n": 0, "mean": None, "median": None, "std": None, "min": None, "max": None}
    return {
        "n": n,
        "mean": float(arr.mean()),
        "median": float(np.median(arr)),
        "std": float(arr.std(ddof=1)) if n >= 2 else None,
        "min": float(arr.min()),
        "max": float(arr.max()),
    }


def paired(x: Sequence[Any], y: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The pairs where both values are present, as two float64 arrays.

    Raises:
        ValueError: x and y differ in length.
    """
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length ({len(x)} vs {len(y)})")
    keep = [i for i in range(len(x)) if not _is_missing(x[i]) and not _is_missing(y[i])]
    return (
        np.asarray([float(x[i]) for i in keep], dtype=np.float64),
        np.asarray([float(y[i]) for i in keep], dtype=np.float64),
    )


def _pearson_arrays(x: np.ndarray, y: np.ndarray) -> float | None:
    if x.size < 2:
        return None
    dx = x - x.mean()
    dy = y - y.mean()
    denom = math.sqrt(float(np.dot(dx, dx)) * float(np.dot(dy, dy)))
    if denom == 0.0:
        return None
    r = float(np.dot(dx, dy)) / denom
    return max(-1.0, min(1.0, r))


def pearson(x: Sequence[Any], y: Sequence[Any]) -> float | None:
    """Pearson's r over the pairs where both values are present.

    Args:
        x: numbers (None/NaN allowed).
        y: numbers, same length as x.

    Returns:
        r in [-1, 1]; None with fewer than two pairs or when either side is constant.

    Raises:
        ValueError: x and y differ in length.
    """
    return _pearson_arrays(*paired(x, y))


def rankdata(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (scipy's `rankdata(method="average")`)."""
    arr = np.asarray(values, dtype=np.float64)
    order = np.argsort(arr, kind="mergesort")
    sorted_vals = arr[order]
    ranks = np.empty(arr.size, dtype=np.float64)
    i = 0
    while i < arr.size:
        j = i
        while j + 1 < arr.size and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(x: Sequence[Any], y: Sequence[Any]) -> float | None:
    """Spearman's rho (Pearson's r of average ranks) over the pairs where both values are present.

    Args:
        x, y: as for `pearson`.

    Returns:
        rho in [-1, 1]; None with fewer than two pairs or when either side is constant.

    Raises:
        ValueError: x and y differ in length.
    """
    xs, ys = paired(x, y)
    return _pearson_arrays(rankdata(xs), rankdata(ys))  # fewer than two pairs: None, as for `pearson`


def ecdf(values: Iterable[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF: the distinct values, sorted, and the fraction of values <= each.

    Args:
        values: numbers; None/NaN are dropped.

    Returns:
        `(xs, ps)`, both empty when there are no values.
    """
    arr = clean(values)
    if arr.size == 0:
        return arr, arr
    xs, counts = np.unique(arr, return_counts=True)
    return xs, np.cumsum(counts) / arr.size
