"""Uniform neighbour sampling: validity, fan-out bounds, uniformity, determinism, relabelling."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from graphdist.data.graph import Graph
from graphdist.testing import random_graph, tiny_graph
from sampling import CSRNeighborSource, NeighborSampler, SampledBatch, check_fanouts, sample_csr


def _graph_with_hub() -> Graph:
    """A random graph plus one hub (node 0 linked to 120 others): degrees from 0 to ~125."""
    g = random_graph(400, avg_degree=6.0, seed=3)
    hub_nbrs = torch.arange(1, 121)
    extra = torch.stack([hub_nbrs, torch.zeros_like(hub_nbrs)])
    ei = torch.cat([g.edge_index(), extra, extra.flip(0)], dim=1)
    return Graph.from_edge_index(ei, num_nodes=g.num_nodes, x=g.x, y=g.y).to_undirected()


def _edge_keys(g: Graph) -> torch.Tensor:
    return g.dst_of_edges() * g.num_nodes + g.indices.to(torch.int64)


def _check_structure(batch: SampledBatch, seeds: torch.Tensor, fanouts: list[int]) -> None:
    blocks = batch.blocks
    assert len(blocks) == len(fanouts)
    assert torch.equal(batch.seed_nodes, seeds)
    assert torch.equal(batch.input_nodes[: seeds.numel()], seeds)
    assert batch.input_nodes.unique().numel() == batch.input_nodes.numel()
    assert blocks[-1].num_dst == seeds.numel()
    assert blocks[0].num_src == batch.input_nodes.numel()
    for outer, inner in zip(blocks[:-1], blocks[1:]):
        assert outer.num_dst == inner.num_src
    for b in blocks:
        assert b.src.dtype == b.dst.dtype == b.indptr.dtype == torch.int64
        assert bool((b.dst[1:] >= b.dst[:-1]).all())
        assert torch.equal(b.in_degrees(), torch.bincount(b.dst, minlength=b.num_dst))
        assert b.num_edges == 0 or (int(b.src.max()) < b.num_src and int(b.dst.max()) < b.num_dst)
        assert b.edge_index.shape == (2, b.num_edges) and b.size == (b.num_src, b.num_dst)


@pytest.mark.parametrize("fanouts", [[5, 3], [2, 2, 2], [-1, 4], [50]])
def test_sampled_edges_are_real_and_bounded(fanouts):
    g = _graph_with_hub()
    keys = _edge_keys(g)
    deg = g.degrees()
    seeds = torch.tensor([0, 5, 17, 42, 399, 250])
    batch = NeighborSampler(g, fanouts, seed=0).sample(seeds)
    _check_structure(batch, seeds, fanouts)
    ids = batch.input_nodes
    for block, fanout in zip(batch.blocks, fanouts[::-1]):
        src_g, dst_g = ids[block.src], ids[block.dst]
        assert bool(torch.isin(dst_g * g.num_nodes + src_g, keys).all()), "sampled an edge the graph lacks"
        # Without replacement: no neighbour twice, at most the fan-out, all of them when fewer.
        per_edge = dst_g * g.num_nodes + src_g
        assert per_edge.unique().numel() == per_edge.numel()
        want = deg[ids[: block.num_dst]] if fanout < 0 else deg[ids[: block.num_dst]].clamp(max=fanout)
        assert torch.equal(block.in_degrees(), want)


def test_small_nodes_get_exactly_their_neighbours():
    g = tiny_graph()  # every node has degree 2 or 3
    batch = NeighborSampler(g, [3], seed=0).sample(torch.arange(10))
    b = batch.blocks[0]
    for v in range(10):
        got = batch.input_nodes[b.src[b.indptr[v] : b.indptr[v + 1]]]
        assert sorted(got.tolist()) == sorted(g.in_neighbors(v).tolist())


def test_with_replacement_gives_exactly_fanout_draws():
    g = _graph_with_hub()
    deg = g.degrees()
    seeds = torch.arange(0, 400, 7)
    batch = NeighborSampler(g, [6, 4], replace=True, seed=1).sample(seeds)
    _check_structure(batch, seeds, [6, 4])
    keys = _edge_keys(g)
    ids = batch.input_nodes
    for block, fanout in zip(batch.blocks, [4, 6]):
        want = torch.where(deg[ids[: block.num_dst]] > 0, fanout, 0)
        assert torch.equal(block.in_degrees(), want)
        assert bool(torch.isin(ids[block.dst] * g.num_nodes + ids[block.src], keys).all())


# ------------------------------------------------------------------ uniformity
def _neighbour_counts(draw, degree: int, fanout: int, repeats: int):
    """Per-neighbour counts and per-pair co-occurrence counts over ``repeats`` draws of one node."""
    offsets = draw(degree, fanout, repeats)  # [repeats, k] offsets in range(degree)
    single = torch.bincount(offsets.reshape(-1), minlength=degree)
    hit = torch.zeros(repeats, degree)
    hit.scatter_(1, offsets, 1.0)
    pairs = hit.t() @ hit
    iu = torch.triu_indices(degree, degree, offset=1)
    return single, pairs[iu[0], iu[1]]


def _uniform_pvalues(draw, degree: int = 10, fanout: int = 3, repeats: int = 6000) -> tuple[float, float]:
    """Chi-square p-values: each neighbour with frequency k/d, each pair with k(k-1)/(d(d-1))."""
    single, pairs = _neighbour_counts(draw, degree, fanout, repeats)
    p_single = stats.chisquare(single.numpy(), torch.full((degree,), repeats * fanout / degree).numpy()).pvalue
    exp_pair = repeats * fanout * (fanout - 1) / (degree * (degree - 1))
    p_pair = stats.chisquare(pairs.numpy(), torch.full_like(pairs, exp_pair).numpy()).pvalue
    return float(p_single), float(p_pair)


def _draw_csr(degree: int, fanout: int, repeats: int, replace: bool = False) -> torch.Tensor:
    """Samples node 0 of a star (neighbours 1..degree) ``repeats`` times through CSRNeighborSource."""
    star = Graph.from_csr(torch.tensor([0, degree] + [degree] * degree), torch.arange(1, degree + 1))
    gen = torch.Generator().manual_seed(1234)
    nbrs, counts = CSRNeighborSource(star).sample_neighbors(torch.zeros(repeats, dtype=torch.int64), fanout,
                                                            replace, gen)
    assert bool((counts == fanout).all())
    return (nbrs - 1).view(repeats, fanout)


def _draw_first_k(degree: int, fanout: int, repeats: int) -> torch.Tensor:
    return torch.arange(fanout).expand(repeats, fanout)


def _draw_random_window(degree: int, fanout: int, repeats: int) -> torch.Tensor:
    """k consecutive neighbours from a random start: each neighbour k/d, but pairs are biased."""
    start = torch.randint(0, degree, (repeats, 1), generator=torch.Generator().manual_seed(0))
    return (start + torch.arange(fanout)) % degree


def test_without_replacement_is_uniform():
    p_single, p_pair = _uniform_pvalues(_draw_csr)
    assert p_single > 1e-3 and p_pair > 1e-3


def test_uniformity_test_rejects_biased_samplers():
    p_single, _ = _uniform_pvalues(_draw_first_k)
    assert p_single < 1e-6, "taking the first k neighbours must fail the uniformity test"
    p_single, p_pair = _uniform_pvalues(_draw_random_window)
    assert p_pair < 1e-6, "a random window is uniform per neighbour but not per subset; the pair test must see it"


@pytest.mark.parametrize("degree,fanout", [(6, 5), (40, 15), (12, 1)])
def test_without_replacement_uniform_across_degrees(degree, fanout):
    draws = _draw_csr(degree, fanout, 4000)
    assert all(len(set(row)) == fanout for row in draws[:200].tolist())  # distinct within a draw
    counts = torch.bincount(draws.reshape(-1), minlength=degree).numpy()
    assert stats.chisquare(counts).pvalue > 1e-3


def test_with_replacement_is_uniform():
    draws = _draw_csr(10, 4, 5000, replace=True)
    counts = torch.bincount(draws.reshape(-1), minlength=10).numpy()
    assert stats.chisquare(counts).pvalue > 1e-3
    assert (draws[:, :, None] == draws[:, None, :]).sum() > draws.numel(), "with replacement must repeat sometimes"


# ------------------------------------------------------------------ determinism and relabelling
def _same(a: SampledBatch, b: SampledBatch) -> bool:
    return (
        torch.equal(a.input_nodes, b.input_nodes)
        and len(a.blocks) == len(b.blocks)
        and all(torch.equal(x.src, y.src) and torch.equal(x.indptr, y.indptr) for x, y in zip(a.blocks, b.blocks))
    )


def test_same_seed_same_batch_and_state_replay():
    g = _graph_with_hub()
    seeds = torch.tensor([3, 1, 4, 15, 92, 65])
    a = NeighborSampler(g, [4, 3], seed=7)
    b = NeighborSampler(g, [4, 3], seed=7)
    assert _same(a.sample(seeds), b.sample(seeds))
    state = a.get_state()
    first = a.sample(seeds)
    assert not _same(first, NeighborSampler(g, [4, 3], seed=8).sample(seeds))
    a.set_state(state)
    assert _same(first, a.sample(seeds))


def test_dense_and_sort_relabelling_agree():
    g = _graph_with_hub()
    seeds = torch.tensor([0, 9, 8, 300, 2])
    for replace in (False, True):
        dense = NeighborSampler(g, [5, 4, 3], replace=replace, seed=2, relabel="dense").sample(seeds)
        sort = NeighborSampler(g, [5, 4, 3], replace=replace, seed=2, relabel="sort").sample(seeds)
        assert _same(dense, sort)
        _check_structure(sort, seeds, [5, 4, 3])


def test_scratch_state_is_clean_between_batches():
    g = _graph_with_hub()
    s = NeighborSampler(g, [3, 3], seed=0)
    s.sample(torch.arange(50))
    assert bool((s._relabeler.mark == torch.iinfo(torch.int32).max).all())
    batch = s.sample(torch.tensor([7]))  # ids from the previous batch must not leak in
    _check_structure(batch, torch.tensor([7]), [3, 3])


def test_repeated_seeds_rejected_and_empty_seeds_ok():
    g = tiny_graph()
    s = NeighborSampler(g, [2], seed=0)
    with pytest.raises(ValueError, match="distinct"):
        s.sample(torch.tensor([1, 2, 1]))
    s.sample(torch.tensor([1, 2]))  # still usable after the error
    empty = s.sample(torch.zeros(0, dtype=torch.int64))
    assert empty.input_nodes.numel() == 0 and empty.blocks[0].num_edges == 0
    with pytest.raises(ValueError, match="distinct"):
        NeighborSampler(g, [2], seed=0, relabel="sort").sample(torch.tensor([3, 3]))


def test_fanout_validation():
    assert check_fanouts([3, -1]) == [3, -1]
    for bad in ([], [0], [3, -2]):
        with pytest.raises(ValueError, match="fanouts"):
            check_fanouts(bad)


def test_sample_csr_int32_indices_and_hub_precision():
    g = tiny_graph()
    nb32, c32 = sample_csr(g.indptr, g.indices.to(torch.int32), torch.arange(10), -1)
    nb64, c64 = sample_csr(g.indptr, g.indices.to(torch.int64), torch.arange(10), -1)
    assert nb32.dtype == torch.int64 and torch.equal(nb32, nb64) and torch.equal(c32, c64)


def test_padded_sampling_matches_compact_sampling():
    from sampling.kernels import sample_csr_padded, unpad

    g = _graph_with_hub()
    nodes = torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(0))[:200]
    for replace in (False, True):
        for k in (1, 4, 30):
            gen_a, gen_b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
            nbrs, counts = sample_csr(g.indptr, g.indices, nodes, k, replace, gen_a)
            table = sample_csr_padded(g.indptr, g.indices, nodes, k, replace, gen_b)
            assert table.shape == (200, k)
            got_nbrs, got_counts = unpad(table)
            assert torch.equal(got_counts, counts) and torch.equal(got_nbrs, nbrs)
            got_nbrs, got_counts = unpad(table.to(torch.int32))  # the distributed source's ids
            assert torch.equal(got_counts, counts) and torch.equal(got_nbrs, nbrs) and got_nbrs.dtype == torch.int64
    for empty in (torch.full((3, 2), -1), torch.zeros((0, 4), dtype=torch.int32), torch.zeros((2, 0), dtype=torch.int32)):
        got_nbrs, got_counts = unpad(empty)
        assert got_nbrs.numel() == 0 and got_counts.tolist() == [0] * empty.shape[0]
    # A node without neighbours at the very end of the CSR gets only padding.
    lonely = Graph.from_edge_index(torch.tensor([[1], [0]]), num_nodes=3)
    assert sample_csr_padded(lonely.indptr, lonely.indices, torch.tensor([2, 0]), 2, True).tolist() == [
        [-1, -1], [1, 1]]
    with pytest.raises(ValueError, match="fixed fan-out"):
        sample_csr_padded(lonely.indptr, lonely.indices, torch.tensor([0]), -1)


def _global_edges(batch: SampledBatch, layer: int) -> set:
    block, ids = batch.blocks[layer], batch.input_nodes
    return set(zip(ids[block.src].tolist(), ids[block.dst].tolist()))


class _SteppingSource(CSRNeighborSource):
    """A local source that pauses like the distributed one (three steps per hop)."""

    pipelined = True

    def __init__(self, graph: Graph) -> None:
        super().__init__(graph)
        self.steps = 0

    def sample_neighbors_stepwise(self, nodes, fanout, replace=False, generator=None):
        for _ in range(3):
            self.steps += 1
            yield
        return self.sample_neighbors(nodes, fanout, replace, generator)


def test_sample_stream_pipelines_batches_in_order():
    g = random_graph(300, avg_degree=5.0, seed=1)
    source = _SteppingSource(g)
    sampler = NeighborSampler(source, [-1, 4], seed=0, pipeline=2)
    plain = NeighborSampler(g, [-1, 4], seed=0)
    batches = [torch.arange(i, 300, 7)[:10] for i in range(5)]
    got = list(sampler.sample_stream(batches))
    assert [b.seed_nodes.tolist() for b in got] == [s.tolist() for s in batches]
    assert source.steps == 5 * 2 * 3
    keys = _edge_keys(g)
    for seeds, batch in zip(batches, got):
        _check_structure(batch, seeds, [-1, 4])
        # The full-fan-out hop is the same whatever the interleaving, and every edge is real.
        expected = plain.sample(seeds)
        assert _global_edges(batch, -1) == _global_edges(expected, -1)
        for block in batch.blocks:
            src, dst = batch.input_nodes[block.src], batch.input_nodes[block.dst]
            assert bool(torch.isin(dst * g.num_nodes + src, keys).all())
    # Abandoned half-way: both batches in flight are reset, so the sampler stays usable.
    stream = sampler.sample_stream(batches)
    next(stream)
    stream.close()
    assert all(bool((r.mark == torch.iinfo(torch.int32).max).all()) for r in sampler._relabelers)
    _check_structure(sampler.sample(batches[0]), batches[0], [-1, 4])
    with pytest.raises(ValueError, match="pipeline"):
        NeighborSampler(g, [2], pipeline=0)
