"""Batch statistics equal scipy's on the same numbers; undefined values are None."""

from __future__ import annotations

import math
import statistics
import warnings

import numpy as np
import pytest
from scipy import stats as sp

from rollout_dataset.batch.stats import describe, ecdf, pearson, rankdata, spearman

RNG = np.random.default_rng(7)
CASES = {
    "continuous": (RNG.normal(size=40).tolist(), RNG.normal(size=40).tolist()),
    "related": ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [0.1, 0.9, 2.5, 2.9, 4.2, 6.0]),
    "ties": ([0, 1, 1, 2, 2, 2, 3, 0], [0.0, 0.5, 0.5, 1.0, 0.25, 1.0, 1.0, 0.0]),
    "reward_like": ([0.0, 1.0, 1.0, 2.0, 0.0, 3.0, 1.0], [0.2, 1.0, 0.8, 1.0, 0.0, 1.0, 0.6]),
    "anti": ([1, 2, 3, 4], [8, 6, 4, 2]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_pearson_equals_scipy(name):
    x, y = CASES[name]
    assert pearson(x, y) == pytest.approx(sp.pearsonr(x, y).statistic, abs=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_spearman_equals_scipy_including_ties(name):
    x, y = CASES[name]
    assert spearman(x, y) == pytest.approx(sp.spearmanr(x, y).statistic, abs=1e-12)


def test_rankdata_averages_ties_like_scipy():
    values = [3.0, 1.0, 3.0, 2.0, 1.0, 3.0]
    assert rankdata(values).tolist() == sp.rankdata(values, method="average").tolist()


def test_constant_input_gives_none_where_scipy_gives_nan():
    x, y = [1.0, 2.0, 3.0], [0.5, 0.5, 0.5]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert math.isnan(sp.pearsonr(x, y).statistic)
        assert math.isnan(sp.spearmanr(x, y).statistic)
    assert pearson(x, y) is None
    assert spearman(x, y) is None


def test_fewer_than_two_pairs_gives_none():
    assert pearson([1.0], [2.0]) is None
    assert spearman([], []) is None


def test_missing_values_are_dropped_pairwise():
    x = [0.0, 1.0, None, 2.0, 3.0, float("nan")]
    y = [0.0, 0.4, 0.7, None, 1.0, 2.0]
    kept_x, kept_y = [0.0, 1.0, 3.0], [0.0, 0.4, 1.0]
    assert pearson(x, y) == pytest.approx(sp.pearsonr(kept_x, kept_y).statistic, abs=1e-12)
    assert spearman(x, y) == pytest.approx(sp.spearmanr(kept_x, kept_y).statistic, abs=1e-12)


def test_lengths_must_agree():
    with pytest.raises(ValueError, match="differ in length"):
        pearson([1, 2], [1])


def test_describe_matches_the_statistics_module_and_drops_missing():
    values = [0.5, None, 1.0, 0.0, 1.0, float("nan"), 0.25]
    kept = [0.5, 1.0, 0.0, 1.0, 0.25]
    d = describe(values)
    assert d["n"] == 5
    assert d["mean"] == pytest.approx(statistics.mean(kept))
    assert d["median"] == pytest.approx(statistics.median(kept))
    assert d["std"] == pytest.approx(statistics.stdev(kept))
    assert (d["min"], d["max"]) == (0.0, 1.0)


def test_describe_of_one_value_has_no_std_and_of_none_has_nothing():
    assert describe([2.0])["std"] is None
    assert describe([]) == {"n": 0, "mean": None, "median": None, "std": None, "min": None, "max": None}


def test_ecdf_counts_ties_once_and_steps_to_one():
    xs, ps = ecdf([2, 0, 1, None, 1])
    assert xs.tolist() == [0.0, 1.0, 2.0]
    assert ps.tolist() == [0.25, 0.75, 1.0]
