"""Layer-wise gradient sync (DWBP, SACP), halo embedding exchange and model averaging."""
