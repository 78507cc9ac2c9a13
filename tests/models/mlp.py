"""An MNIST-shaped multilayer perceptron: nn.Sequential(Flatten, Linear 784->128, ReLU, Dropout,
Linear 128->64, ReLU, Linear 64->10), so its state_dict keys are "1.weight", "1.bias", "4.weight", ...

The converter numbers the Linear layers in order (layers.0, layers.1, layers.2) and records the activation
after each one: relu, relu, identity (Dropout is the identity at inference). forward() takes images
[B, 1, 28, 28] or [B, 784] and returns logits [B, 10].
"""
import torch
import torch.nn as nn

from .common import perturb_vectors


def make_config(**overrides):
    cfg = {"model_type": "mlp", "activation": "relu"}
    cfg.update(overrides)
    return cfg


def build(seed=0, **overrides):
    cfg = make_config(**overrides)
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Flatten(),
        nn.Linear(784, 128), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(128, 64), nn.ReLU(),
        nn.Linear(64, 10),
    ).eval()
    perturb_vectors(model, seed)
    return model, cfg
