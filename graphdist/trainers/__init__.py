"""Training strategies (minibatch, fullgraph, aggregation): compose store, sampler, model and sync."""
