"""The rotating-object data set of the Diffusion-Maps experiment (paper Fig. 4).

The paper used 2,000 photographs of a toy bunny on a turntable (Lederman & Talmon).
Those frames cannot be downloaded here, so the offline default renders an asymmetric,
bunny-like object made of ellipsoids on a turntable, with Lambertian shading and an
orthographic camera looking down at it. The true rotation angle of every frame is
known, which lets the workflow score the recovered circle. A folder of real frames
can be loaded with :func:`load_frames`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from basis.errors import InputError

# (centre xyz, semi-axes xyz) in the object's frame; y is the turntable's axis.
BUNNY_PARTS = (
    ((0.0, 0.0, 0.0), (0.95, 0.65, 0.60)),  # body
    ((0.85, 0.45, 0.0), (0.45, 0.40, 0.38)),  # head
    ((0.75, 1.05, 0.15), (0.12, 0.45, 0.10)),  # ear, upright
    ((0.95, 0.95, -0.20), (0.12, 0.40, 0.10)),  # ear, leaning
    ((-0.95, 0.10, 0.0), (0.20, 0.20, 0.20)),  # tail
    ((0.45, -0.55, 0.35), (0.35, 0.12, 0.15)),  # front paw, one side only
)


def _rotation_y(angle: np.ndarray) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    zero, one = np.zeros_like(angle), np.ones_like(angle)
    return np.stack([np.stack([c, zero, s], -1), np.stack([zero, one, zero], -1), np.stack([-s, zero, c], -1)], -2)


def render_turntable(
    n_frames: int = 2000, resolution: int = 64, elevation_deg: float = 25.0, seed: int = 0, chunk: int = 64
) -> tuple[np.ndarray, np.ndarray]:
    """Render ``n_frames`` grayscale frames at random turntable angles.

    Returns images of shape (n_frames, resolution, resolution) in [0, 1] and the
    angles in radians, in [0, 2 pi).
    """
    angles = np.random.default_rng(seed).uniform(0.0, 2 * np.pi, n_frames)
    elevation = np.deg2rad(elevation_deg)
    view = np.array([0.0, -np.sin(elevation), -np.cos(elevation)])  # camera looks along this
    right = np.array([1.0, 0.0, 0.0])
    up = np.cross(right, view)
    grid = np.linspace(-1.7, 1.7, resolution)
    u, v = np.meshgrid(grid, -grid)
    origins = (u[..., None] * right + (v[..., None] + 0.2) * up - 5.0 * view).reshape(-1, 3)
    light = np.array([0.4, 0.8, 0.6]) / np.linalg.norm([0.4, 0.8, 0.6])
    centres = np.array([p[0] for p in BUNNY_PARTS])
    axes = np.array([p[1] for p in BUNNY_PARTS])
    images = np.empty((n_frames, resolution * resolution), dtype=np.float32)
    for start in range(0, n_frames, chunk):
        rot = _rotation_y(angles[start : start + chunk])  # object -> world
        # Rays in the object's frame: x_obj = R^T x_world.
        o = np.einsum("fji,pj->fpi", rot, origins)[:, :, None, :] - centres  # (f, p, parts, 3)
        d = np.einsum("fji,j->fi", rot, view)[:, None, None, :]
        p, q = o / axes, d / axes
        a = (q * q).sum(-1)
        b = 2 * (p * q).sum(-1)
        c = (p * p).sum(-1) - 1.0
        disc = b * b - 4 * a * c
        t = np.where(disc >= 0, (-b - np.sqrt(np.maximum(disc, 0))) / (2 * a), np.inf)
        nearest = t.argmin(-1)
        t_hit = np.take_along_axis(t, nearest[..., None], -1)[..., 0]
        hit = np.isfinite(t_hit)
        point = np.take_along_axis(o, nearest[..., None, None], 2)[:, :, 0] + t_hit[..., None] * d[:, :, 0]
        normal_obj = point / axes[nearest] ** 2
        normal = np.einsum("fij,fpj->fpi", rot, np.where(hit[..., None], normal_obj, 0.0))
        normal /= np.maximum(np.linalg.norm(normal, axis=-1, keepdims=True), 1e-12)
        shade = 0.15 + 0.85 * np.clip(normal @ light, 0.0, None)
        images[start : start + chunk] = np.where(hit, shade, 0.0)
    return images.reshape(n_frames, resolution, resolution), angles


def load_frames(folder: str | Path, resolution: int | None = None) -> np.ndarray:
    """Grayscale frames from a folder of image files (sorted by name) as (n, h, w) in [0, 1]."""
    from PIL import Image

    paths = sorted(
        p for p in Path(folder).iterdir() if p.suffix.lower() in {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff"}
    )
    if not paths:
        raise InputError(f"no image files (.png, .jpg, ...) in bunny frame folder {folder}")
    frames = []
    for path in paths:
        image = Image.open(path).convert("L")
        if resolution:
            image = image.resize((resolution, resolution))
        frames.append(np.asarray(image, dtype=np.float32) / 255.0)
    return np.stack(frames)


def circular_correlation(estimated: np.ndarray, true: np.ndarray) -> float:
    """How well an angle tracks another up to rotation and reflection, in [0, 1].

    The mean resultant length of alpha - theta (or alpha + theta, for a mirrored
    circle): 1 when alpha = +-theta + c exactly, near 0 for unrelated angles.
    """
    same = np.abs(np.mean(np.exp(1j * (estimated - true))))
    mirrored = np.abs(np.mean(np.exp(1j * (estimated + true))))
    return float(max(same, mirrored))
