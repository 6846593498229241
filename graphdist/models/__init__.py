"""Reference GNNs (GraphSAGE, GCN, GAT) on sampled blocks, and the adapter for user modules."""
