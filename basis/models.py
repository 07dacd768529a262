"""Networks: the spectral MLP shared by every method, and the Siamese feature CNNs."""

from __future__ import annotations

import torch
from torch import nn

from basis.errors import InputError


class SpectralMLP(nn.Module):
    """Fully connected net d -> hidden... -> K with ReLU in between and a linear output.

    ``output_activation="tanh"`` bounds the output as SpectralNet's last layer does.
    ``output_map`` (K x K, float64) is applied by :meth:`embed` after the output:
    identity for BASiS and Diffusion Net, SpectralNet's orthonormalisation weights, or
    SpecNet2's post-processing matrix O. It is a buffer, so it is saved with the model.
    """

    def __init__(self, in_dim: int, out_dim: int, hidden: tuple[int, ...], output_activation: str | None = None):
        super().__init__()
        if output_activation not in (None, "tanh"):
            raise InputError(f"output_activation must be None or 'tanh', got {output_activation!r}")
        widths = (in_dim, *hidden)
        layers: list[nn.Module] = []
        for w_in, w_out in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(w_in, w_out), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], out_dim))
        if output_activation == "tanh":
            layers.append(nn.Tanh())
        self.net = nn.Sequential(*layers)
        self.register_buffer("output_map", torch.eye(out_dim, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Network output followed by the stored output map, in float64."""
        return self.net(x).double() @ self.output_map

    def weight_matrices(self) -> list[torch.Tensor]:
        return [m.weight for m in self.net if isinstance(m, nn.Linear)]


class SiameseCNN(nn.Module):
    """Convolutional feature net for the Siamese contrastive training.

    For 28x28 and 32x32 inputs it is the authors' MNIST net: Conv(c->20, k5) - MaxPool2 -
    Conv(20->50, k5) - MaxPool2 - Linear(., 500) - ReLU - Linear(500, 10) - Linear(10, out).
    For 8x8 inputs (scikit-learn digits) the convolutions use k3 and padding 1 so the
    feature map survives both poolings.
    """

    def __init__(self, in_shape: tuple[int, int, int], out_dim: int = 16):
        super().__init__()
        channels, height, width = in_shape
        kernel, padding = (5, 0) if min(height, width) >= 16 else (3, 1)
        self.conv = nn.Sequential(
            nn.Conv2d(channels, 20, kernel, padding=padding),
            nn.MaxPool2d(2),
            nn.Conv2d(20, 50, kernel, padding=padding),
            nn.MaxPool2d(2),
            nn.Flatten(),
        )
        # The map's size after two stages of a stride-1 convolution and a 2x2 pooling that
        # floors, worked out rather than probed (no convolution runs outside training).
        for _ in range(2):
            height, width = ((size + 2 * padding - kernel + 1) // 2 for size in (height, width))
        flat = 50 * height * width
        self.head = nn.Sequential(nn.Linear(flat, 500), nn.ReLU(), nn.Linear(500, 10), nn.Linear(10, out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x))
