"""The workflow's config checks, the store check and the GPU count, without Snakemake: the
functions the workflow calls at parse time, torch-free."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import HANG_GUARD_S
from snakemake.utils import validate

from basis.catalog import FEATURE_SETS, TOY_SETS, method_names
from basis.catalog.data_sources import NAME_PATTERN, SOURCE_KEYS
from basis.catalog.settings import REFERENCE_KEYS
from basis.errors import InputError
from basis.plan.registry import study_names
from basis.plan.workflow_config import (
    ablation_variants,
    check_workflow_config,
    method_assignments,
    protocol_assignments,
)
from basis.runtime.gpus import visible_gpu_count
from basis.tracking import check_results_store

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"
CONFIGS = [ROOT / "config/config.yaml", ROOT / "config/quick.yaml", ROOT / "tests/configs/tiny.yaml"]


def _config(path=ROOT / "tests/configs/tiny.yaml", **changes):
    """A shipped config with the schema's defaults set, as the workflow sees it."""
    config = yaml.safe_load(Path(path).read_text())
    for dotted, value in changes.items():
        *parents, key = dotted.split("__")
        node = config
        for parent in parents:
            node = node[parent]
        node[key] = value
    validate(config, str(SCHEMA))
    return config


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_passes(path):
    runs = check_workflow_config(_config(path))
    assert set(runs) == set(study_names())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"protocol__graph__n_neighbors": 128},
            "config: protocol.graph.n_neighbors (128) must be smaller than protocol.batch_size (128)",
        ),
        (
            {"experiments__knn__n_neighbors": [10, 200, 300]},
            "config: experiments.knn.n_neighbors ([200, 300]) must be smaller than protocol.batch_size (128)",
        ),
        ({"methods": {"basis": {}}}, "config: experiments.knn.methods ['specnet1'] are not in methods ['basis']"),
        ({"seeds_together": True}, "config: seeds_together: true needs seeds_in_one_job: true"),
        ({"methods__specnet1": {"anchors_per_class": 3}}, "config: methods.specnet1 or protocol:"),
        ({"experiments__ablation__settings": {"n_iter": 0}}, "config: experiments.ablation.settings:"),
        (
            {"experiments__variants__settings__protocol": {"batch_size": 1}},
            "config: experiments.variants.settings.protocol:",
        ),
        ({"experiments__toy__settings": {"n_samples": 900, "epochs": 3}}, "config: experiments.toy: toy takes no"),
        (
            {"experiments__scale__settings": {"methods": ["basis", "umap"]}},
            "config: experiments.scale: methods=['basis', 'umap'] (list) is not valid: expected list[Literal[",
        ),
        (
            {"experiments__scale__settings": {"n_points": [400, 1200], "landmarks": [100, 500]}},
            "config: experiments.scale: every n of n_points must exceed the largest of landmarks (500), got 400",
        ),
        (
            {"experiments__scale__settings": {"dataset": "mnist", "n_points": [10000, 70000]}},
            "config: experiments.scale: n_points up to 70,000 and n_test need more than mnist's 70,000 points",
        ),
    ],
)
def test_a_config_the_schema_cannot_refuse_is_refused_in_one_line(changes, message):
    with pytest.raises(InputError) as refused:
        check_workflow_config(_config(**changes))
    assert str(refused.value).startswith(message), str(refused.value)
    assert "\n" not in str(refused.value)


def test_seeds_together_is_refused_where_a_method_declares_its_seeds_apart():
    config = _config(seeds_together=True, seeds_in_one_job=True, methods__specnet2={"gradient": "neighbor"})
    with pytest.raises(InputError, match="specnet2 cannot train its seeds together: with gradient='neighbor'"):
        check_workflow_config(config)


def test_a_missing_study_section_is_named():
    config = _config()
    del config["experiments"]["bunny"]
    with pytest.raises(InputError, match=r"experiments has no section for the studies \['bunny'\]"):
        check_workflow_config(config)


def test_the_checks_import_neither_torch_nor_snakemake():
    code = (
        "import sys, yaml\n"
        "from basis.plan.workflow_config import check_workflow_config\n"
        "from basis.runtime.gpus import visible_gpu_count\n"
        "from basis.tracking import check_results_store\n"
        f"config = yaml.safe_load(open({str(ROOT / 'tests/configs/tiny.yaml')!r}))\n"
        "config.setdefault('seeds_together', 'auto')\n"
        "check_workflow_config(config); visible_gpu_count(); check_results_store()\n"
        "print(sorted(m for m in ('torch', 'snakemake', 'mlflow') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "[]"


def test_the_settings_a_job_gets_are_the_protocol_then_the_methods_own():
    config = _config()
    assert method_assignments(config, "basis")[-1] == "anchors_per_class=10"
    assert method_assignments(config, "basis")[0] == f"batch_size={config['protocol']['batch_size']}"
    # a reference takes the protocol's reference keys only, diffusion_time among them when set
    config["protocol"]["diffusion_time"] = 2.0
    keys = {assignment.split("=", 1)[0] for assignment in protocol_assignments(config, REFERENCE_KEYS)}
    assert keys == set(REFERENCE_KEYS)


def test_the_ablation_variants_add_outliers_only_where_a_fraction_is_set():
    assert ablation_variants(outliers=False) == ["ransac", "lstsq", "none"]
    assert ablation_variants(outliers=True)[3:] == ["ransac-outliers", "lstsq-outliers", "none-outliers"]


def test_the_schema_names_what_the_catalog_declares():
    """The schema's lists of names are the catalog's: a method or data set added to one and
    not the other fails here."""
    schema = yaml.safe_load(SCHEMA.read_text())["properties"]
    # methods are the declarations' alone: the schema lists none, the parse refuses an unknown one
    assert not any(name in SCHEMA.read_text() for name in ("specnet1_published", "diffusion_net"))
    config = _config()
    config["methods"]["spectral_clustering"] = {}
    with pytest.raises(InputError, match="unknown method 'spectral_clustering'; valid: .*'basis'"):
        check_workflow_config(config)
    config = _config()
    config["experiments"]["knn"]["methods"] = ["basis", "spectral_clustering"]
    with pytest.raises(InputError, match=r"experiments.knn.methods \['spectral_clustering'\]"):
        check_workflow_config(config)
    # the data sets a run takes: the feature sets and the toy sets (the bunny is its study's)
    catalog, own = schema["datasets"]["items"]["anyOf"]
    assert catalog["enum"] == [*FEATURE_SETS, *TOY_SETS]
    assert own["pattern"] == NAME_PATTERN.pattern  # or a data set of one's own
    experiments = schema["experiments"]["properties"]
    assert experiments["knn"]["properties"]["dataset"] == schema["datasets"]["items"]
    assert experiments["ablation"]["properties"]["datasets"]["items"] == schema["datasets"]["items"]
    assert schema["data_sources"]["additionalProperties"]["properties"].keys() == set(SOURCE_KEYS)
    toy = schema["experiments"]["properties"]["toy"]["properties"]["datasets"]["items"]["enum"]
    assert toy == list(TOY_SETS)


@pytest.mark.parametrize(
    ("visible", "count"),
    [(None, 2), ("0", 1), ("1,0", 2), ("0,1,2,3", 2), ("", 0), ("-1", 0), ("0,-1,1", 1), ("GPU-8a1b", 1)],
)
def test_the_gpus_are_counted_from_their_device_files_as_cuda_visible_devices_shows_them(
    tmp_path, monkeypatch, visible, count
):
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"):
        (tmp_path / name).touch()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert visible_gpu_count(tmp_path) == count


def test_no_device_folder_means_no_gpu(tmp_path):
    assert visible_gpu_count(tmp_path / "missing", visible=None) == 0
    assert visible_gpu_count(tmp_path, visible="0") == 0  # a CPU-only box


def test_results_without_their_store_are_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    flag, store = tmp_path / "experiments.json", tmp_path / "mlflow"
    check_results_store(flag, store)  # never tracked: nothing to check
    flag.write_text(json.dumps({"store": "1700000000000"}))
    with pytest.raises(InputError, match="mlflow.db is missing, so the runs behind results/ are not in it"):
        check_results_store(flag, store)
    store.mkdir()
    (store / "mlflow.db").write_bytes(b"not a database" * 100)
    with pytest.raises(InputError, match="is not a readable MLflow database"):
        check_results_store(flag, store)


def test_the_checks_do_not_change_the_config():
    config = _config()
    kept = copy.deepcopy(config)
    check_workflow_config(config)
    assert config == kept


@pytest.mark.parametrize("method", method_names())
def test_the_catalog_reads_each_methods_seeds_apart_declaration_as_its_class_holds_it(method):
    from basis.catalog import seeds_apart_when, seeds_never_together
    from basis.estimators import make_estimator

    estimator = make_estimator(method)
    assert seeds_apart_when(method) == type(estimator).SEEDS_APART_WHEN
    assert seeds_never_together(method) == type(estimator).SEEDS_NEVER_TOGETHER
    for key, (value, why) in seeds_apart_when(method).items():
        assert make_estimator(method, **{key: value})._why_not_together() == why


def test_data_sets_of_ones_own_are_named_where_catalog_names_are_and_checked(tmp_path):
    (tmp_path / "points.csv").write_text("a,b\n" + "".join(f"{i},{i % 7}\n" for i in range(300)))
    config = _config()
    config["data_sources"] = {"mine": {"path": str(tmp_path / "points.csv"), "n_components": 2}}
    config["datasets"] = ["digits", "mine"]
    config["experiments"]["knn"]["dataset"] = "mine"
    validate(config, str(SCHEMA))
    check_workflow_config(config)
    config["experiments"]["alignment_error"]["datasets"] = ["mine"]  # a study that draws anchors per class
    with pytest.raises(InputError, match="experiments.alignment_error: data set mine has no labels"):
        check_workflow_config(config)
    config["experiments"]["alignment_error"]["datasets"] = ["digits"]
    config["experiments"]["ablation"]["datasets"] = ["yours"]
    with pytest.raises(InputError, match=r"ablation.datasets: 'yours' is neither .* \(declared: \['mine'\]\)"):
        check_workflow_config(config)


def test_seeds_together_is_refused_for_a_method_whose_seeds_never_train_together():
    """The published SpectralNet trains one network at a time: refused by the config's check
    (a dry run), not only when its job starts."""
    config = _config(seeds_together=True, seeds_in_one_job=True)
    config["methods"]["specnet1_published"] = {}
    with pytest.raises(InputError, match="specnet1_published cannot train its seeds together: the spectralnet"):
        check_workflow_config(config)


@pytest.mark.parametrize(
    "text, words",
    [
        ("name: x\ndatasets: [digits\nseeds: 2\n", "my.yaml, line 3, column 6: not valid YAML: expected ',' or ']'"),
        ("name: x\n\tseeds: 2\n", "my.yaml, line 2, column 1: not valid YAML: found character '\\t'"),
        ("name: x\n  seeds: 2\n", "my.yaml, line 2, column 8: not valid YAML: mapping values are not allowed here"),
        ("- a\n- b\n", "my.yaml: a config is a mapping of keys, got a list"),
        ("name: x\n", "config my.yaml: (top level): 'data_root' is a required property"),
    ],
)
def test_the_readmes_config_check_names_the_line_of_malformed_yaml(tmp_path, text, words):
    """Snakemake's message for malformed YAML names no line; `python -m basis config my.yaml`
    (the README's, and what make run and make quick run first) does, in one line, exit 2."""
    (tmp_path / "my.yaml").write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "basis", "config", "my.yaml"], cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=HANG_GUARD_S,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {words}"), done.stderr


@pytest.mark.parametrize("path", sorted((ROOT / "config").glob("*.yaml")))
def test_the_config_check_passes_every_shipped_config(path):
    done = subprocess.run([sys.executable, "-m", "basis", "config", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=HANG_GUARD_S)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_every_setting_that_does_not_fit_ones_own_data_is_named_at_once_by_the_dry_run(tmp_path):
    """Twenty classes of 15 images (COIL-20's shape, smaller): the protocol's anchors, the
    feature-change batch against its three classes and the alignment-error study's default
    batch of 1,024 against the training split, refused together when the config is read
    (they stopped one job at a time, some after the features job)."""
    from own_data import write_image_folder

    folder = write_image_folder(tmp_path / "images", classes=tuple(range(10)), per_class=15)
    for digit in range(10):  # ten more classes: the same digits under other names
        (folder / f"more_{digit}").mkdir()
        for image in (folder / f"digit_{digit}").iterdir():
            (folder / f"more_{digit}" / image.name).write_bytes(image.read_bytes())
    config = _config()
    config["data_sources"] = {"mine": {"path": str(folder)}}
    config["datasets"] = ["mine"]
    config["protocol"]["batch_size"] = 200
    config["methods"]["basis"] = {"anchors_per_class": 10}
    studies = config["experiments"]
    studies["feature_change"]["settings"]["dataset"] = "mine"
    studies["feature_change"]["subset"]["classes"] = [0, 1, 2]
    studies["alignment_error"]["datasets"] = ["mine"]
    validate(config, str(SCHEMA))
    with pytest.raises(InputError) as refused:
        check_workflow_config(config)
    line = str(refused.value)
    assert "\n" not in line and line.startswith("config: 3 setting(s) do not fit the data: ")
    assert (
        "methods.basis.anchors_per_class 10 x 20 classes of mine = 200 anchors leave no room in a batch of 200" in line
    )
    assert (
        "experiments.feature_change (subset): batch_size 100 exceeds the training split of mine, classes [0, 1, 2]"
        in line
    )
    assert "experiments.alignment_error (mine): batch_sizes [250] must hold the 120 shared nodes" in line
    studies["alignment_error"]["settings"].pop("batch_sizes")  # the default's 1,024 exceeds 240 points too
    with pytest.raises(InputError, match=r"batch_sizes \[256, 512, 1024\] must hold the 120 shared nodes"):
        check_workflow_config(config)
    config["methods"]["basis"] = {"anchors_per_class": 5}
    config["protocol"]["batch_size"] = 120
    studies["feature_change"]["subset"]["batch_size"] = 30
    studies["feature_change"]["settings"]["dataset"] = "digits"
    studies["alignment_error"]["datasets"] = ["digits"]
    check_workflow_config(config)  # fits: nothing refused
