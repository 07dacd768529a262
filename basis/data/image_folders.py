"""An image folder of one's own, in torchvision's ``ImageFolder`` layout.

One sub-folder per class, each holding PNG or JPEG images (hidden files aside); class
codes follow the sub-folders' sorted names, as ``ImageFolder`` gives them. Every image is
read and checked before anything is computed, and a problem is an
:class:`~basis.errors.InputError` naming the file: an empty folder or class, a single
class, a file that is not an image or is truncated, a 0-byte file, a symlink loop, a device
file, grey and colour images mixed, sizes that differ with no ``image_size`` to resize to.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from basis.catalog.data_sources import IMAGE_SUFFIXES
from basis.data.feature_tables import check_regular_file
from basis.errors import InputError

#: PIL's modes by the channels they become: grey images one, colour three (alpha dropped).
GREY_MODES = ("1", "L", "LA", "I", "I;16", "F")


@dataclass(frozen=True)
class ImageFolder:
    """Images (n, channels, height, width) in [0, 1], class codes, and the classes' names."""

    images: np.ndarray
    labels: np.ndarray
    classes: tuple[str, ...]


def class_folders(root: Path) -> list[Path]:
    """The class sub-folders of an image folder, sorted, each checked to hold an image."""
    if not root.is_dir():
        raise InputError(f"image folder {root} is not a folder")
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not folders:
        raise InputError(f"image folder {root} has no class folders (one sub-folder of images per class)")
    if len(folders) == 1:
        raise InputError(f"image folder {root} has one class ({folders[0].name}); a clustering needs at least two")
    return folders


def _image_files(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    for path in files:
        if path.is_dir():
            raise InputError(f"image folder {folder}: {path.name} is a folder; a class folder holds images only")
        if path.suffix.lower() not in IMAGE_SUFFIXES:
            raise InputError(f"image folder {folder}: {path.name} is not an image ({', '.join(IMAGE_SUFFIXES)})")
    if not files:
        raise InputError(f"image folder {folder} (a class) holds no image")
    return files


def _read(path: Path, size: tuple[int, int] | None):
    """One image as PIL reads it, whole (a truncated file fails here), and its channels."""
    from PIL import Image, UnidentifiedImageError

    resolved = check_regular_file(path, "image")
    try:
        with Image.open(resolved) as image:
            image.load()
            channels = 1 if image.mode in GREY_MODES else 3
            image = image.convert("L" if channels == 1 else "RGB")
    except UnidentifiedImageError:
        raise InputError(f"image {path} is not an image PIL can read") from None
    except (OSError, SyntaxError, ValueError) as err:  # truncated or corrupt data
        raise InputError(f"image {path} is corrupt or truncated ({err})") from None
    if size is not None and image.size != (size[1], size[0]):
        image = image.resize((size[1], size[0]), Image.Resampling.BILINEAR)
    return image, channels


def load_image_folder(
    root: str | Path, image_size: tuple[int, int] | None = None, classes: tuple[str, ...] | None = None
) -> ImageFolder:
    """The images of ``root`` (see the module's docs), resized to ``image_size`` (height,
    width) when given. ``classes``: the class names a second folder (a test split) must
    have, so that its codes mean the same."""
    root = Path(root)
    folders = class_folders(root)
    names = tuple(folder.name for folder in folders)
    if classes is not None and names != classes:
        raise InputError(f"image folder {root} has the classes {list(names)}, its training folder {list(classes)}")
    images, labels, first = [], [], {}
    for code, folder in enumerate(folders):
        for path in _image_files(folder):
            image, channels = _read(path, image_size)
            first.setdefault(channels, path)
            if len(first) > 1:
                raise InputError(
                    f"image folder {root} mixes grey and colour images ({first[1]} is grey, {first[3]} colour)"
                )
            if images and image.size != images[0].size:
                raise InputError(
                    f"image folder {root}: {path} is {image.size[0]}x{image.size[1]} and {first[channels]}"
                    f" {images[0].size[0]}x{images[0].size[1]} (width x height); declare image_size to resize them"
                )
            images.append(image)
            labels.append(code)
    stacked = np.stack([np.asarray(image, dtype=np.float32) / 255.0 for image in images])
    stacked = stacked[:, None] if stacked.ndim == 3 else stacked.transpose(0, 3, 1, 2)
    return ImageFolder(np.ascontiguousarray(stacked), np.asarray(labels, dtype=np.int64), names)
