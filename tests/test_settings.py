"""The import-light catalog, settings and plan agree with the library they describe."""

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

from basis import catalog
from basis.catalog.settings import resolve_settings
from basis.changing_features import FeatureChangeTrainer
from basis.choices import matches_annotation
from basis.data.toy_sets import TOY_SETS
from basis.errors import InputError
from basis.estimators import METHODS
from basis.plan import registry as plan
from basis.plan import versions
from basis.studies import study_function, study_module

ROOT = Path(__file__).resolve().parents[1]


def test_the_declarations_read_without_torch_match_the_imported_code():
    assert catalog.method_names() == sorted(METHODS)
    for name, cls in METHODS.items():
        assert list(catalog.method_parameters(name)) == cls.parameter_names()
        assert catalog.method_defaults(name) == {
            key: value for key, value in cls().get_params().items() if key in catalog.method_defaults(name)
        }
    modules = sorted(
        path.stem
        for path in (ROOT / "basis" / "studies").glob("*.py")
        if path.stem not in (*plan.STUDY_HELPERS, "__init__")
    )
    assert sorted(plan.study_names()) == modules
    for name in plan.study_names():
        assert plan.study_declaration(name) is study_module(name).STUDY
        function = study_function(name)
        own = [p for p in inspect.signature(function).parameters.values() if p.kind is not p.VAR_KEYWORD]
        expected = [p.name for p in own]
        if len(own) < len(inspect.signature(function).parameters):  # **settings go to the trainer
            passed_on = inspect.signature(FeatureChangeTrainer).parameters
            expected += [p for p in passed_on if p not in (*catalog.RUN_PARAMETERS, *expected)]
        assert plan.study_parameters(name, include_common=True) == expected
    assert catalog.TOY_SETS == tuple(TOY_SETS)


def test_the_catalog_settings_and_plan_import_neither_torch_nor_mlflow_nor_matplotlib():
    """What a dry run imports: the declarations of every method and study included."""
    code = (
        "import sys, basis.catalog, basis.catalog.settings, basis.tracking;"
        " import basis.plan.workflow_config, basis.plan.versions;"
        " from basis.plan.registry import study_names, study_annotations;"
        " [study_annotations(name) for name in study_names()];"
        " print(sorted({'torch', 'mlflow', 'matplotlib'} & set(sys.modules)))"
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
        (["basis", "exact"], 'list[Literal["basis", "exact", "sklearn"]] | None', True),
        (["basis", "umap"], 'list[Literal["basis", "exact", "sklearn"]] | None', False),
        ("exact", 'Literal["basis", "exact"]', True),
    ],
)
def test_values_are_checked_against_the_annotations(value, annotation, fits):
    assert matches_annotation(value, annotation) is fits


def test_code_versions_keep_methods_apart():
    before = {m: versions.code_version([m]) for m in catalog.method_names()}
    modules = {m: versions._method_files()[m] for m in before}
    for m in before:  # each method's own module counts; methods of one module share it
        assert [n for n in before if before[n] == before[m]] == [n for n in before if modules[n] == modules[m]]
    assert before["specnet1_published"] == before["specnet1_published_paper_graph"] != before["specnet1"]
    assert versions.code_version(presentation=True) != versions.code_version()
    with pytest.raises(InputError, match="unknown method"):
        versions.code_version(["specnet3"])


def test_settings_name_the_unknown_key_and_the_valid_ones():
    with pytest.raises(InputError, match="unknown key 'graph.k'; valid graph keys"):
        resolve_settings("basis", assignments=["graph.k=3"])
    settings = resolve_settings("specnet2", assignments=['graph={"n_neighbors": 20}', "graph.scale=global"])
    assert settings["graph"]["n_neighbors"] == 20 and settings["graph"]["scale"] == "global"


def test_a_study_edit_reruns_what_it_touches(tmp_path):
    """Editing a study's computing code changes that study's code version only; editing
    its figure or claims changes the presentation version only."""
    import shutil

    shutil.copytree(ROOT / "basis", tmp_path / "basis", ignore=shutil.ignore_patterns("__pycache__"))
    probe = (
        "import json; from basis.plan.registry import study_names; from basis.plan.versions import code_version;"
        " print(json.dumps({**{n: code_version(study=n) for n in study_names()},"
        " 'presentation': code_version(presentation=True), 'runs': code_version(['basis']),"
        " 'specnet2_runs': code_version(['specnet2'])}))"
    )

    def versions():
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": tmp_path}
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def changed(edit):
        before = versions()
        toy = tmp_path / "basis" / "studies" / "toy.py"
        toy.write_text(edit(toy.read_text()))
        after = versions()
        return sorted(k for k in before if before[k] != after[k])

    assert changed(lambda text: text + "\n# a comment\n") == []
    assert changed(lambda text: text.replace('"""Sec. 5.1: NMI and ACC', '"""Sec. 5.1: the NMI and ACC')) == [
        "presentation"
    ]
    assert changed(lambda text: text.replace("n_iter: int = 1000,", "n_iter: int = 999,")) == ["toy"]
    # BASiS's modules (its class, and its batch targets, which no other method imports): its
    # runs and the studies that train it, directly or through the library
    trains_basis = ["bunny", "feature_change", "toy", "variants"]
    for module, old, new in [("basis", "MAX_REDRAWS = 20", "MAX_REDRAWS = 21"), ("targets", "float64", "float64 ")]:
        path = tmp_path / "basis" / "estimators" / f"{module}.py"
        before = versions()
        path.write_text(path.read_text().replace(old, new, 1))
        after = versions()
        assert sorted(k for k in before if before[k] != after[k]) == sorted(["runs", *trains_basis])


def test_study_modules_import_no_other_study_module():
    """A study's code version covers its own module and the library, not other studies'
    modules: what two studies share belongs in the library or in the helpers they share
    (``basis.studies.protocols``, ``basis.studies.figures``)."""
    import ast

    for path in (ROOT / "basis" / "studies").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("basis.studies."):
                assert node.module.split(".")[2] in plan.STUDY_HELPERS, (path.name, node.module)
