"""What several of notebook 08's test files need: a tiny transformer and a batch for it, made by the
notebook's own helpers. Each takes `nb`, the helpers as the calling test module loaded them
(load_helpers("08")), so that what it makes is of the same namespace as what the test compares it with."""
import torch


def tiny_model(nb, seed=0):
    torch.manual_seed(seed)
    return nb.make_transformer(16, 16, 2, 2)


def tiny_batch(nb, batch=8, seed=0):
    return nb.make_batch(batch, seed, 8, 16)
