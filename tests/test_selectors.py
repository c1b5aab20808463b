"""The study's selectors: contract, exactness, unbiasedness, accuracy and edge cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bayes_microbench import simulate_responses
from bayes_microbench.exceptions import UserInputError
from bayes_microbench.selectors import SELECTORS, get_selector
from bayes_microbench.selectors._cluster import (
    kmeans,
    kmeans_1d,
    kmedoids,
    nan_correlation,
    sample_projection_dpp,
)
from bayes_microbench.selectors.base import PreparedSelector, Selector
from bayes_microbench.selectors.stratified import proportional_allocation
from bayes_microbench.selectors.tinybenchmarks import fit_ability, fit_irt

STUDY = [
    "random-subtask-equal",
    "random-subtask-proportional",
    "stratified-confidence",
    "anchor-points",
    "tinybenchmarks",
    "tinybenchmarks-pirt",
    "tinybenchmarks-gpirt",
    "diversity",
]
ALL = ["random", *STUDY]


@pytest.fixture(scope="module")
def data() -> dict[str, np.ndarray]:
    """Simulated source / target split with 4 equal subtasks and 5% missing cells."""
    resp = simulate_responses("gpqa", n_llms=110, n_items=120, missing_rate=0.05, random_seed=11)
    y = resp.values
    return {
        "source": y[:80],
        "target": y[80:],
        "codes": np.repeat(np.arange(4), 30),
    }


def _prepare(name: str, data: dict[str, np.ndarray], seed: int = 0) -> PreparedSelector:
    return get_selector(name).prepare(data["source"], data["codes"], None, random_seed=seed)


def _seen_accuracy(target: np.ndarray) -> np.ndarray:
    obs = ~np.isnan(target)
    return np.where(obs, target, 0.0).sum(1) / obs.sum(1)


def test_registry_has_the_study_names():
    assert set(ALL) <= set(SELECTORS)
    for name in ALL:
        sel = get_selector(name)
        assert isinstance(sel, Selector)
        assert sel.name == name


@pytest.mark.parametrize("name", ALL)
def test_selection_contract_and_determinism(name, data):
    prep = _prepare(name, data)
    assert isinstance(prep, PreparedSelector)
    assert prep.n_seen == 120
    for n in (12, 40):
        sel = prep.select(n, random_seed=5)
        assert sel.items.shape == (n,)
        assert np.unique(sel.items).size == n
        assert sel.items.min() >= 0 and sel.items.max() < 120
        assert np.all(sel.weights >= 0)
        assert sel.weights.sum() == pytest.approx(1.0, abs=1e-12)
        est = prep.estimate(sel, data["target"][:, sel.items])
        assert est.shape == (data["target"].shape[0],)
        assert np.all(np.isfinite(est)) and np.all((est >= 0) & (est <= 1))
        # same seeds (prepare and select) -> identical output
        again = _prepare(name, data).select(n, random_seed=5)
        np.testing.assert_array_equal(sel.items, again.items)
        np.testing.assert_array_equal(sel.weights, again.weights)
        np.testing.assert_array_equal(est, prep.estimate(again, data["target"][:, again.items]))


@pytest.mark.parametrize("name", ALL)
def test_different_seeds_give_different_selections(name, data):
    prep = _prepare(name, data)
    picks = {tuple(np.sort(prep.select(20, random_seed=s).items)) for s in range(4)}
    assert len(picks) > 1


@pytest.mark.parametrize("name", ALL)
def test_whole_seen_set_gives_the_seen_accuracy(name, data):
    prep = _prepare(name, data)
    sel = prep.select(120, random_seed=1)
    assert np.array_equal(np.sort(sel.items), np.arange(120))
    target = data["target"][:, sel.items]
    np.testing.assert_allclose(
        prep.estimate(sel, target), _seen_accuracy(data["target"][:, sel.items]), atol=1e-12
    )


@pytest.mark.parametrize("name", ALL)
def test_sizes_outside_the_seen_set_are_user_errors(name, data):
    prep = _prepare(name, data)
    with pytest.raises(UserInputError, match="larger than the 120 seen items"):
        prep.select(121, random_seed=0)
    with pytest.raises(UserInputError, match="positive whole number"):
        prep.select(0, random_seed=0)


# ------------------------------------------------------------------ subtasks
def test_subtask_equal_allocation_is_exact():
    codes = np.repeat(np.arange(4), [10, 20, 30, 40])
    source = np.ones((5, 100))
    prep = get_selector("random-subtask-equal").prepare(source, codes)
    for seed in range(20):
        sel = prep.select(10, random_seed=seed)
        counts = np.bincount(codes[sel.items], minlength=4)
        assert sorted(counts.tolist()) == [2, 2, 3, 3]
        assert sel.info["per_subtask"] == dict(enumerate(counts.tolist()))
    # fewer items than subtasks: n subtasks with one item each (the study's rule)
    counts = np.bincount(codes[prep.select(3, random_seed=0).items], minlength=4)
    assert sorted(counts.tolist()) == [0, 1, 1, 1]


def test_subtask_equal_too_small_subtask_is_a_clear_error():
    codes = np.repeat(np.arange(2), [3, 50])
    prep = get_selector("random-subtask-equal").prepare(np.ones((4, 53)), codes)
    prep.select(6, random_seed=0)  # 3 + 3 fits
    with pytest.raises(UserInputError, match=r"subtask 0: 3 seen < 5"):
        prep.select(10, random_seed=0)


def test_subtask_equal_mean_is_unbiased_for_the_subtask_average():
    rng = np.random.default_rng(0)
    codes = np.repeat(np.arange(3), [10, 20, 30])
    target = (rng.random((4, 60)) < np.repeat([0.2, 0.5, 0.8], [10, 20, 30])).astype(float)
    macro = np.stack([target[:, codes == s].mean(1) for s in range(3)], 1).mean(1)
    prep = get_selector("random-subtask-equal").prepare(np.ones((2, 60)), codes)
    est = np.array(
        [
            prep.estimate(sel, target[:, sel.items])
            for sel in (prep.select(9, random_seed=s) for s in range(600))
        ]
    )
    se = est.std(0) / np.sqrt(len(est))
    assert np.all(np.abs(est.mean(0) - macro) < 4 * se + 1e-12)


def test_subtask_proportional_weights_are_one_over_subtask_size():
    codes = np.repeat(np.arange(2), [10, 90])
    prep = get_selector("random-subtask-proportional").prepare(np.ones((3, 100)), codes)
    np.testing.assert_allclose(prep.probabilities[codes == 0], 0.05)
    np.testing.assert_allclose(prep.probabilities[codes == 1], 0.5 / 90)
    hits = np.array([codes[prep.select(1, random_seed=s).items[0]] == 0 for s in range(2000)])
    assert abs(hits.mean() - 0.5) < 0.035  # 3.2 binomial SEs


# ---------------------------------------------------------------- stratified
def test_proportional_allocation_sums_exactly_and_covers_every_stratum():
    rng = np.random.default_rng(3)
    for _ in range(200):
        sizes = rng.integers(1, 40, size=rng.integers(1, 11))
        n = int(rng.integers(sizes.size, sizes.sum() + 1))
        alloc = proportional_allocation(n, sizes)
        assert alloc.sum() == n
        assert np.all(alloc >= 1) and np.all(alloc <= sizes)
        quota = n * sizes / sizes.sum()
        if quota.min() >= 1:  # no stratum needs topping up: Hamilton's quota property
            assert np.all(np.abs(alloc - quota) < 1)
    np.testing.assert_array_equal(proportional_allocation(10, np.array([50, 30, 20])), [5, 3, 2])
    np.testing.assert_array_equal(proportional_allocation(8, np.array([29, 2, 1])), [6, 1, 1])


def test_stratified_horvitz_thompson_is_unbiased(data):
    prep = _prepare("stratified-confidence", data)
    assert prep.info["n_strata"] == 10
    assert prep.info["signal"].startswith("correctness")
    target = np.nan_to_num(data["target"][:8], nan=0.0)
    truth = target.mean(1)
    est = []
    for s in range(500):
        sel = prep.select(15, random_seed=s)
        assert sel.info["signal"].startswith("correctness")
        est.append(prep.estimate(sel, target[:, sel.items]))
    est = np.array(est)
    se = est.std(0) / np.sqrt(len(est))
    assert np.all(np.abs(est.mean(0) - truth) < 4 * se)
    assert np.all(np.abs(est.mean(0) - truth) < 0.01)


def test_stratified_needs_one_item_per_stratum(data):
    prep = _prepare("stratified-confidence", data)
    with pytest.raises(UserInputError, match="smaller than the 10 confidence strata"):
        prep.select(9, random_seed=0)


def test_confidence_based_selectors_use_confidences_when_given(data):
    rng = np.random.default_rng(0)
    conf = np.clip(np.nan_to_num(data["source"], nan=0.5) * 0.6 + rng.random((80, 120)) * 0.4, 0, 1)
    for name in ("stratified-confidence", "anchor-points", "diversity"):
        prep = get_selector(name).prepare(data["source"], data["codes"], conf, random_seed=0)
        sel = prep.select(20, random_seed=0)
        assert sel.info["signal"] == "confidence in the correct answer"
        no_conf = _prepare(name, data).select(20, random_seed=0)
        assert no_conf.info["signal"] == "correctness (no confidences available)"


# ------------------------------------------------------------ anchor points
def test_anchor_points_weights_are_cluster_shares(data):
    prep = _prepare("anchor-points", data)
    sel = prep.select(15, random_seed=2)
    dist = prep.distance
    members = dist[:, sel.items].argmin(1)
    members[sel.items] = np.arange(15)
    np.testing.assert_allclose(sel.weights, np.bincount(members, minlength=15) / 120)


def _anchor_points_as_before(prep, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The selection from a row-major float32 copy (docs/decisions/0021's layout)."""
    medoids = kmedoids(prep.distance.astype(np.float32), n, np.random.default_rng(seed))
    members = prep.distance[:, medoids].argmin(1)
    members[medoids] = np.arange(n)
    sizes = np.bincount(members, minlength=n)
    return medoids, sizes / sizes.sum()


def _check_anchor_points_as_before(resp, sources, sizes, runs) -> None:
    from bayes_microbench.protocol import design_runs

    designs = design_runs(resp.n_llms, resp.subtask_codes, n_runs=runs, n_targets=50, random_seed=0)
    selector = get_selector("anchor-points")
    for r, design in enumerate(designs):
        for n_src in sources:
            x = resp.values[np.ix_(design.sources(n_src), design.seen)]
            prep = selector.prepare(x, resp.subtask_codes[design.seen], random_seed=0)
            assert prep.search_distance.flags.f_contiguous
            for n in sizes:
                seed = 1000 * r + n_src + n
                medoids, weights = _anchor_points_as_before(prep, n, seed)
                sel = prep.select(n, random_seed=seed)
                np.testing.assert_array_equal(sel.items, medoids)
                np.testing.assert_array_equal(sel.weights, weights)


def test_anchor_points_column_major_search_selects_as_before():
    """GPQA's size: FasterPAM on the column-major copy ends on the same medoids, same order."""
    resp = simulate_responses("gpqa", n_llms=420, n_items=448, random_seed=0)
    _check_anchor_points_as_before(resp, sources=(10, 100, 300), sizes=(10, 25, 100), runs=2)


@pytest.mark.long
def test_anchor_points_column_major_search_selects_as_before_at_mmlu_pro_size():
    """MMLU-Pro's size (420 x 12000, 6000 seen items): the same medoids and weights."""
    resp = simulate_responses("mmlu-pro", n_llms=420, n_items=12000, random_seed=0)
    _check_anchor_points_as_before(resp, sources=(100,), sizes=(10, 100), runs=1)


def test_anchor_points_handles_items_all_source_llms_got_right(data):
    source = data["source"].copy()
    source[:, :5] = 1.0  # constant items: correlation undefined
    source[:, 5] = 0.0
    prep = get_selector("anchor-points").prepare(source, data["codes"], random_seed=0)
    assert np.all(np.isfinite(prep.distance))
    assert np.allclose(prep.distance[:5, :5], 0.0)  # identical constant items
    assert np.allclose(prep.distance[0, 5:], 1.0)  # undefined correlation -> distance 1
    sel = prep.select(30, random_seed=0)
    assert np.unique(sel.items).size == 30


def _clustered_responses(n_llms: int, sizes: list[int], seed: int) -> np.ndarray:
    """Items in blocks that each measure their own ability (independent simulations)."""
    blocks = [
        simulate_responses(
            "gpqa",
            n_llms=n_llms,
            n_items=m,
            n_subtasks=1,
            model="2pl",
            discrimination_logmean=1.2,
            discrimination_logsd=0.1,
            difficulty_sd=0.4,
            difficulty_mean=0.0,
            subtask_mean_sd=0.0,
            random_seed=seed * 100 + c,
        ).values
        for c, m in enumerate(sizes)
    ]
    return np.hstack(blocks)


def _mean_abs_error(names: list[str], y: np.ndarray, n: int, splits: int, seeds: int) -> dict:
    codes = np.zeros(y.shape[1], dtype=np.int64)
    err: dict[str, list[float]] = {k: [] for k in names}
    for split in range(splits):
        perm = np.random.default_rng(split).permutation(y.shape[0])
        target, source = y[perm[:60]], y[perm[60:]]
        truth = target.mean(1)
        for name in names:
            prep = get_selector(name).prepare(source, codes, None, random_seed=split)
            for seed in range(seeds):
                sel = prep.select(n, random_seed=1000 * split + seed)
                err[name].append(
                    float(np.abs(prep.estimate(sel, target[:, sel.items]) - truth).mean())
                )
    return {k: np.mean(v) for k, v in err.items()}


def test_anchor_points_and_pirt_beat_random_on_clustered_items():
    # Vivek et al. (Anchor Points) and Polo et al. (tinyBenchmarks): with items that
    # cluster, a few representatives estimate accuracy better than a random handful.
    y = _clustered_responses(230, [40, 30, 25, 20, 15, 15, 10, 10, 8, 7, 10, 10], seed=1)
    mae = _mean_abs_error(["random", "anchor-points", "tinybenchmarks-pirt"], y, 10, 3, 4)
    assert mae["anchor-points"] < 0.85 * mae["random"], mae
    assert mae["tinybenchmarks-pirt"] < 0.75 * mae["random"], mae


def test_pirt_beats_random_on_unidimensional_irt_data():
    y = simulate_responses("gpqa", n_llms=220, n_items=160, random_seed=3).values
    mae = _mean_abs_error(["random", "tinybenchmarks-pirt", "tinybenchmarks-gpirt"], y, 10, 2, 4)
    assert mae["tinybenchmarks-pirt"] < 0.7 * mae["random"], mae
    assert mae["tinybenchmarks-gpirt"] < 0.7 * mae["random"], mae


# ------------------------------------------------------------ tinybenchmarks
def test_tinybenchmarks_variants_share_one_fit_and_one_selection(data):
    preps = [_prepare(n, data, seed=4) for n in ("tinybenchmarks", "tinybenchmarks-pirt")]
    assert preps[0].fit is preps[1].fit
    a, b = (p.select(25, random_seed=9) for p in preps)
    np.testing.assert_array_equal(a.items, b.items)
    assert a.info["estimator"] == "weighted" and b.info["estimator"] == "pirt"


def test_tinybenchmarks_anchor_is_nearest_member_of_its_cluster(data):
    prep = _prepare("tinybenchmarks", data)
    sel = prep.select(12, random_seed=3)
    emb = prep.fit.embedding
    # each anchor's cluster weight times N is an integer cluster size; sizes sum to N
    sizes = sel.weights * 120
    np.testing.assert_allclose(sizes, np.round(sizes), atol=1e-9)
    assert np.all(sizes >= 1)
    assert emb.shape == (120, 11)


def test_irt_fit_tracks_the_true_response_probabilities():
    resp, truth = simulate_responses(
        "gpqa", n_llms=150, n_items=80, model="2pl", random_seed=5, return_truth=True
    )
    item_means = np.broadcast_to(resp.values.mean(0), truth.p_correct.shape)
    r_items = np.corrcoef(item_means.ravel(), truth.p_correct.ravel())[0, 1]

    def r_fit(dims: int) -> float:
        fit = fit_irt(resp.values, dims=dims, random_seed=0, max_iter=300)
        z = fit.ability @ fit.discrimination.T - fit.difficulty[None, :]
        return float(np.corrcoef((1 / (1 + np.exp(-z))).ravel(), truth.p_correct.ravel())[0, 1])

    assert r_fit(1) > 0.85  # the true model is 1-D
    assert r_fit(10) > r_items  # tinyBenchmarks' 10-D fit still beats item means alone


def test_fit_ability_recovers_a_known_ability():
    rng = np.random.default_rng(0)
    a = rng.normal(1.0, 0.3, size=(2000, 1))
    b = rng.normal(0.0, 1.0, size=2000)
    thetas = np.array([-1.0, 0.0, 1.5])
    p = 1 / (1 + np.exp(-(thetas[:, None] * a.T - b[None, :])))
    y = (rng.random(p.shape) < p).astype(float)
    est = fit_ability(y, a, b)[:, 0]
    np.testing.assert_allclose(est, thetas, atol=0.15)


# ------------------------------------------------------------ numeric kernels
def test_nan_correlation_matches_numpy():
    rng = np.random.default_rng(1)
    x = (rng.random((40, 15)) < 0.5).astype(float)
    ref = np.corrcoef(x, rowvar=False)
    np.testing.assert_allclose(nan_correlation(x), ref, atol=1e-12)
    x[rng.random(x.shape) < 0.2] = np.nan
    c = nan_correlation(x)
    for i, j in [(0, 1), (3, 7), (10, 14)]:
        both = ~np.isnan(x[:, i]) & ~np.isnan(x[:, j])
        assert c[i, j] == pytest.approx(np.corrcoef(x[both, i], x[both, j])[0, 1], abs=1e-12)


def test_nan_correlation_without_missing_cells_equals_the_pairwise_rule():
    from bayes_microbench.selectors._cluster import _full_correlation, _pairwise_correlation

    rng = np.random.default_rng(3)
    x = (rng.random((30, 60)) < 0.6).astype(float)
    x[:, :4] = 1.0  # constant items (two values), some identical
    x[:, 4] = 0.0
    x[:, 10] = x[:, 11]
    c = rng.random((25, 40))
    c[:, 3] = 0.3
    c[:, 4] = c[:, 5]
    counts = rng.integers(0, 4, size=(20, 50)).astype(float)  # small integers: float32 products
    counts[:, 7] = 2.0
    for m in (x, c, x[:1], x[:2], counts):
        ref = _pairwise_correlation(m)
        for block in (1, 7, 256):  # one row at a time, uneven blocks, one block
            np.testing.assert_array_equal(_full_correlation(m, block=block), ref)
    assert nan_correlation(x)[0, 1] == 1.0  # identical constant items
    assert nan_correlation(x)[0, 4] == 0.0  # constant items of different values


def test_cross_products_take_float32_only_where_they_are_exact():
    from bayes_microbench.selectors._cluster import _exact_in_float32

    rng = np.random.default_rng(8)
    binary = (rng.random((300, 40)) < 0.5).astype(float)
    x32 = _exact_in_float32(binary)
    assert x32 is not None and x32.dtype == np.float32
    np.testing.assert_array_equal((x32.T @ x32).astype(float), binary.T @ binary)
    assert _exact_in_float32(binary * 0.5) is None  # not integers
    assert _exact_in_float32(binary * 300.0) is None  # integers, but 300 * 300^2 > 2^24


def test_column_major_float32_keeps_the_values():
    from bayes_microbench.selectors._cluster import column_major_float32

    a = np.random.default_rng(9).random((37, 23))
    for block in (1, 5, 512):  # tiles that do not divide the shape, and one tile
        out = column_major_float32(a, block=block)
        assert out.flags.f_contiguous and out.dtype == np.float32
        np.testing.assert_array_equal(out, a.astype(np.float32))


def test_kmeans_1d_is_globally_optimal():
    rng = np.random.default_rng(2)
    for _ in range(60):
        v = rng.integers(0, 9, size=int(rng.integers(3, 12))).astype(float)
        k = int(rng.integers(1, 5))
        labels = kmeans_1d(v, k)
        # the divide-and-conquer path (used for many distinct values) agrees
        np.testing.assert_array_equal(kmeans_1d(v, k, dense_limit=0), labels)

        def sse(lab: np.ndarray, v: np.ndarray = v) -> float:
            return sum(
                float(((v[lab == c] - v[lab == c].mean()) ** 2).sum()) for c in np.unique(lab)
            )

        u = np.unique(v)
        kk = min(k, u.size)
        best = np.inf
        for cuts in itertools.combinations(range(1, u.size), kk - 1):
            bounds = [0, *cuts, u.size]
            lab = np.zeros(v.size, dtype=int)
            for c in range(kk):
                lab[np.isin(v, u[bounds[c] : bounds[c + 1]])] = c
            best = min(best, sse(lab))
        assert sse(labels) == pytest.approx(best, abs=1e-9)
        assert np.unique(labels).size == kk


def test_kmedoids_reaches_a_swap_local_optimum():
    rng = np.random.default_rng(4)
    pts = rng.normal(size=(30, 2))
    dist = np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1))
    med = kmedoids(dist, 4, rng)
    loss = dist[:, med].min(1).sum()
    for i in range(4):
        for x in set(range(30)) - set(med.tolist()):
            trial = med.copy()
            trial[i] = x
            assert dist[:, trial].min(1).sum() >= loss - 1e-9


def test_kmeans_clusters_are_nonempty_even_with_duplicate_rows():
    x = np.repeat(np.eye(3), 4, axis=0)  # 3 distinct rows, 12 items
    labels, _ = kmeans(x, 12, np.random.default_rng(0))
    assert np.unique(labels).size == 12


def test_projection_dpp_matches_its_inclusion_probabilities():
    rng = np.random.default_rng(5)
    v, _ = np.linalg.qr(rng.normal(size=(7, 3)))
    kernel = v @ v.T
    single = np.zeros(7)
    pair = np.zeros((7, 7))
    draws = 3000
    for _ in range(draws):
        s = sample_projection_dpp(v, rng)
        assert np.unique(s).size == 3
        single[s] += 1
        pair[np.ix_(s, s)] += 1
    np.testing.assert_allclose(single / draws, np.diag(kernel), atol=0.04)
    expected_pair = np.outer(np.diag(kernel), np.diag(kernel)) - kernel**2
    off = ~np.eye(7, dtype=bool)
    np.testing.assert_allclose((pair / draws)[off], expected_pair[off], atol=0.04)
