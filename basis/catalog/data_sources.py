"""Data sets of one's own, as declared: an image folder or a feature table, named.

A declaration is the config's ``data_sources.<name>`` or the command line's ``--data``
and its options; both become one :class:`DataSource`, checked here without reading the
data (the workflow reads declarations at parse time, a dry run included): a name that is
the catalog's, a missing path, a format that is neither a folder nor a table, a test split
given twice. What the files hold is checked as they load (:mod:`basis.data.own_sets`).

The layouts:

- an **image folder** in torchvision's ``ImageFolder`` layout, one sub-folder per class
  holding PNG or JPEG files, every image resized to ``image_size`` (height, width) when
  given (else all must share one size); grey or colour, from the images;
- a **feature table** (:mod:`basis.data.feature_tables`): ``.npy``, ``.npz`` (``X`` and
  optionally ``y``), ``.csv`` or ``.parquet`` with a header and a ``label_column`` or none.

The test split is a ``test_fraction`` of the points, drawn with ``test_seed`` (default: the
data seed), or a second folder or table, ``test_path``, in the same layout.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from basis.catalog import DATASETS, FEATURE_SETS, TEST_FRACTION
from basis.errors import InputError

#: The table formats, by suffix (:mod:`basis.data.feature_tables` reads them).
TABLE_SUFFIXES = (".npy", ".npz", ".csv", ".parquet")
#: The image files of an image folder, by suffix.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
#: The keys of a declaration (``data_sources.<name>`` in the config).
SOURCE_KEYS = ("path", "label_column", "test", "image_size", "n_components")
#: How a data set of one's own may be named: it becomes a wildcard, a folder and a run name.
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
#: The measures an unlabelled data set cannot have, and why: those that compare an embedding
#: with labels, and the authors' d_G, whose evaluation draws its test anchors per class.
NO_LABELS = "not available: the data set has no labels"
UNLABELLED_UNAVAILABLE = {
    **dict.fromkeys(("nmi", "nmi_code", "acc", "accuracy", "accuracy_authors"), NO_LABELS),
    "d_G_code": "not available without labels: the authors' evaluation draws its test anchors per class",
}


def files_below(root: str | Path) -> list[Path]:
    """A table itself, or the images of a folder (its class folders'), sorted."""
    root = Path(root)
    if not root.is_dir():
        return [root]
    return sorted(p for p in root.glob("*/*") if p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith("."))


@dataclass(frozen=True)
class DataSource:
    """One data set of one's own (see the module's docs): its ``name``, its training
    ``path`` (a folder of images or a table), and how it is read and split."""

    name: str
    path: str
    label_column: str | None = None
    test_path: str | None = None
    test_fraction: float = TEST_FRACTION
    test_seed: int | None = None
    image_size: tuple[int, int] | None = None
    n_components: int | None = None

    @property
    def is_images(self) -> bool:
        return Path(self.path).is_dir()

    def has_labels(self) -> bool:
        """Whether the data set is labelled: an image folder, a table with a label column,
        an .npz holding ``y`` (its names read, not its arrays)."""
        suffix = Path(self.path).suffix.lower()
        if self.is_images or self.label_column is not None:
            return True
        if suffix != ".npz":
            return False
        import zipfile

        try:
            with zipfile.ZipFile(self.path) as archive:
                return "y.npy" in archive.namelist()
        except (OSError, zipfile.BadZipFile):
            return False  # refused, naming the problem, when it is read

    def roots(self) -> list[str]:
        """The folders or tables the data set is read from: the training one, and the test one."""
        return [self.path, *([self.test_path] if self.test_path else [])]

    def files(self) -> list[str]:
        """Every file the data set is read from: what a job that reads it depends on."""
        return [str(path) for root in self.roots() for path in files_below(root)]

    def arguments(self) -> list[str]:
        """The command-line options that declare this data set (``--data`` and the rest)."""
        arguments = ["--data", self.path]
        if self.label_column is not None:
            arguments += ["--label-column", self.label_column]
        if self.test_path is not None:
            arguments += ["--test-data", self.test_path]
        else:
            arguments += ["--test-fraction", str(self.test_fraction)]
            arguments += ["--test-seed", str(self.test_seed)] if self.test_seed is not None else []
        if self.image_size is not None:
            arguments += ["--image-size", *map(str, self.image_size)]
        if self.n_components is not None:
            arguments += ["--n-components", str(self.n_components)]
        return arguments

    def declaration(self) -> dict[str, Any]:
        """The declaration as the config states it (``data_source(name, declaration)``
        gives this source back): what a job's data summary records."""
        test = {"path": self.test_path} if self.test_path else {"fraction": self.test_fraction, "seed": self.test_seed}
        declared = {
            "path": self.path,
            "label_column": self.label_column,
            "test": {key: value for key, value in test.items() if value is not None},
            "image_size": list(self.image_size) if self.image_size else None,
            "n_components": self.n_components,
        }
        return {key: value for key, value in declared.items() if value is not None}


def _check_path(path: str, where: str) -> None:
    """A path that exists and is a folder (images) or has a table's suffix."""
    candidate = Path(path)
    try:
        exists = candidate.exists()
    except OSError as err:  # a symlink loop on some systems, a name too long
        raise InputError(f"{where} {path}: {err.strerror or err}") from None
    if not exists:
        loop = candidate.is_symlink()
        raise InputError(f"{where} {path}: {'its symbolic links form a loop' if loop else 'does not exist'}")
    if candidate.is_dir():
        return
    if candidate.suffix.lower() not in TABLE_SUFFIXES:
        raise InputError(f"{where} {path}: neither an image folder nor a feature table ({', '.join(TABLE_SUFFIXES)})")


def data_source(name: str, declaration: Mapping[str, Any], where: str | None = None) -> DataSource:
    """The :class:`DataSource` a declaration describes, checked (see the module's docs);
    ``where`` names it in messages (default: ``data_sources.<name>``)."""
    where = where or f"data_sources.{name}"
    if not NAME_PATTERN.match(name):
        raise InputError(f"{where}: a data set's name is lower-case letters, digits and _, starting with a letter")
    if name in DATASETS:
        raise InputError(f"{where}: {name!r} is a data set of the catalog; give yours another name")
    unknown = sorted(set(declaration) - set(SOURCE_KEYS))
    if unknown:
        raise InputError(f"{where}: unknown keys {unknown}; valid: {list(SOURCE_KEYS)}")
    if not declaration.get("path"):
        raise InputError(f"{where}: path is missing (an image folder or a feature table)")
    path = str(declaration["path"])
    _check_path(path, f"{where}.path")
    test = dict(declaration.get("test") or {})
    if "path" in test and ({"fraction", "seed"} & set(test)):
        raise InputError(f"{where}.test: give a path or a fraction (with a seed), not both")
    if sorted(set(test) - {"path", "fraction", "seed"}):
        raise InputError(f"{where}.test: unknown keys {sorted(set(test) - {'path', 'fraction', 'seed'})}")
    if "path" in test:
        _check_path(str(test["path"]), f"{where}.test.path")
        if Path(test["path"]).is_dir() != Path(path).is_dir():
            raise InputError(f"{where}.test.path {test['path']} is not in the layout of {path}")
    fraction = test.get("fraction", TEST_FRACTION)
    if not isinstance(fraction, int | float) or isinstance(fraction, bool) or not 0 < fraction < 1:
        raise InputError(f"{where}.test.fraction must be a number between 0 and 1, got {fraction!r}")
    size = declaration.get("image_size")
    if size is not None:
        if not Path(path).is_dir():
            raise InputError(f"{where}.image_size is for an image folder; {path} is a table")
        if len(size) != 2 or not all(isinstance(s, int) and not isinstance(s, bool) and 4 <= s <= 1024 for s in size):
            raise InputError(f"{where}.image_size must be [height, width], each 4 to 1024 pixels; got {size!r}")
    if declaration.get("label_column") is not None and Path(path).suffix.lower() not in (".csv", ".parquet"):
        raise InputError(f"{where}.label_column is for a CSV or Parquet table; {path} holds its labels otherwise")
    n_components = declaration.get("n_components")
    if n_components is not None and (
        not isinstance(n_components, int) or isinstance(n_components, bool) or n_components < 1
    ):
        raise InputError(f"{where}.n_components must be a positive integer, got {n_components!r}")
    source = DataSource(
        name,
        path,
        label_column=declaration.get("label_column"),
        test_path=str(test["path"]) if "path" in test else None,
        test_fraction=float(fraction),
        test_seed=test.get("seed"),
        image_size=tuple(size) if size is not None else None,
        n_components=n_components,
    )
    if n_components is None and not source.has_labels():  # its first job would stop there
        flags = where.startswith("--")
        raise InputError(
            f"{where}: {path} has no labels: declare its n_components (its embedding's size"
            f"{', --n-components N' if flags else ''}), or name a table's label column"
            f" ({'--label-column' if flags else 'label_column'})"
        )
    return source


def through_siamese_features(dataset: str | None, source: DataSource | None = None) -> bool:
    """Whether runs on ``dataset`` embed its Siamese features rather than its raw points:
    the catalog's image sets and digits (:data:`~basis.catalog.FEATURE_SETS`), and image
    folders of one's own (``source``, its declaration)."""
    return dataset in FEATURE_SETS or (source is not None and source.is_images)


def data_sources(config: Mapping[str, Any]) -> dict[str, DataSource]:
    """The config's ``data_sources``, each checked (:func:`data_source`)."""
    return {
        name: data_source(name, declaration or {}) for name, declaration in (config.get("data_sources") or {}).items()
    }


def command_line_source(
    dataset: str | None, data: str | None, options: Mapping[str, Any], known: tuple[str, ...] = DATASETS
) -> tuple[str, DataSource | None]:
    """``--dataset`` and ``--data`` with its ``options`` (flag -> value: ``--label-column``,
    ``--test-data``, ``--test-fraction``, ``--test-seed``, ``--image-size``,
    ``--n-components``): the data set's name and its declaration, None for a catalog name."""
    given = [flag for flag, value in options.items() if value is not None]
    if data is None:
        if given:
            raise InputError(f"{given[0]} declares a data set of one's own; give its --data too")
        if dataset is None:
            raise InputError("give --dataset (a catalog name) or --data (a folder or table of your own)")
        if dataset not in known:
            raise InputError(f"--dataset {dataset!r} is not in the catalog ({', '.join(known)}); for yours give --data")
        return dataset, None
    name = dataset or re.sub(r"[^a-z0-9_]", "_", Path(data).stem.lower()).lstrip("_0123456789") or "data"
    test = {
        key: options[flag]
        for key, flag in (("path", "--test-data"), ("fraction", "--test-fraction"), ("seed", "--test-seed"))
        if options.get(flag) is not None
    }
    declaration = {
        "path": data,
        "label_column": options.get("--label-column"),
        "test": test,
        "image_size": options.get("--image-size"),
        "n_components": options.get("--n-components"),
    }
    return name, data_source(name, declaration, where="--data")
