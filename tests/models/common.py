"""Helpers shared by the reference models."""
import torch


def perturb_vectors(model, seed, scale=0.1):
    """Add seeded noise to every rank-1 parameter (biases, norm weights).

    Default init leaves biases at 0 and norm weights at 1; identical values would hide a converter that
    swaps, say, ln_1 and ln_2. Parameters shared between modules are perturbed once."""
    gen = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=gen) * scale)
