"""The import-light catalog and settings agree with the library they describe."""

import inspect
import subprocess
import sys

import pytest

from basis import catalog
from basis.errors import InputError
from basis.estimators import METHODS
from basis.feature_change import FeatureChangeTrainer
from basis.settings import resolve_settings
from basis.studies import STUDIES
from basis.toy import TOY_SETS


def test_the_catalog_read_from_source_matches_the_imported_code():
    assert catalog.method_names() == sorted(METHODS)
    for name, cls in METHODS.items():
        assert list(catalog.method_parameters(name)) == cls.parameter_names()
    assert catalog.study_names() == sorted(STUDIES)
    for name, function in STUDIES.items():
        own = [p for p in inspect.signature(function).parameters.values() if p.kind is not p.VAR_KEYWORD]
        expected = [p.name for p in own]
        if len(own) < len(inspect.signature(function).parameters):  # **settings go to the trainer
            passed_on = inspect.signature(FeatureChangeTrainer).parameters
            expected += [p for p in passed_on if p not in (*catalog.RUN_PARAMETERS, *expected)]
        assert catalog.study_parameters(name, include_common=True) == expected
    assert catalog.TOY_SETS == tuple(TOY_SETS)


def test_the_catalog_and_settings_import_neither_torch_nor_mlflow():
    code = (
        "import sys, basis.catalog, basis.settings, basis.tracking;"
        " print(sorted({'torch', 'mlflow'} & set(sys.modules)))"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    )


@pytest.mark.parametrize(
    "value, annotation, fits",
    [
        (3, "int", True),
        (True, "int", False),
        (2.5, "float", True),
        (2, "float", True),
        ("x", "float", False),
        (None, "int | None", True),
        ([16, 16], "tuple[int, ...]", True),
        ([16, "a"], "tuple[int, ...]", False),
        ({"n_neighbors": 5}, "GraphConfig | dict | None", True),
        ([4, 7, 9], "list[int] | None", True),
    ],
)
def test_values_are_checked_against_the_annotations(value, annotation, fits):
    assert catalog.matches_annotation(value, annotation) is fits


def test_code_versions_keep_methods_apart():
    before = {m: catalog.code_version([m]) for m in catalog.method_names()}
    assert len(set(before.values())) == len(before)  # each method's own module counts
    assert catalog.code_version(presentation=True) != catalog.code_version()
    with pytest.raises(InputError, match="unknown method"):
        catalog.code_version(["specnet3"])


def test_settings_name_the_unknown_key_and_the_valid_ones():
    with pytest.raises(InputError, match="unknown key 'graph.k'; valid graph keys"):
        resolve_settings("basis", assignments=["graph.k=3"])
    settings = resolve_settings("specnet2", assignments=['graph={"n_neighbors": 20}', "graph.scale=global"])
    assert settings["graph"]["n_neighbors"] == 20 and settings["graph"]["scale"] == "global"
