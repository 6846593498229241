"""Neighbourhood sampling over CSR: one ``sample(seeds) -> SampledBatch`` interface.

Will hold the uniform neighbour, full-neighbour and cluster samplers, the
distributed sampler (same interface), the remote-feature fetch and cache, and the
prefetching loader. All vectorised torch: no Python loop over nodes.
"""
