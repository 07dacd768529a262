"""The command line and the workflow's config checks."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import HANG_GUARD_S, assert_refused, copy_workflow, run_snakemake

ROOT = Path(__file__).resolve().parents[1]


def _basis(*args, timeout=HANG_GUARD_S):
    return subprocess.run(
        [sys.executable, "-m", "basis", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def test_run_prints_the_documented_json(tmp_path):
    done = _basis(
        "run",
        "--method",
        "basis",
        "--dataset",
        "blobs",
        "--json",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--set",
        "n_iter=30",
        "--set",
        "batch_size=128",
        "--set",
        "graph.n_neighbors=10",
        "--set",
        "eval.authors_probe_epochs=2",
        "--set",
        "anchors_per_class=5",
        "--set",
        "evaluation=authors",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    scores = {"d_G", "d_G_code", "d_G_colnorm", "d_perp", "d_perp_code", "d_perp_colnorm", "nmi", "nmi_code", "acc"}
    scores |= {"accuracy", "accuracy_authors", "alignment_error_median", "alignment_error_max"}
    scores |= {"d_G_code_skew", "d_G_code_inliers", "ransac_fallbacks", "ransac_unsure_batches"}
    assert set(result) == scores | {"train_seconds", "device"}
    assert 0 <= result["d_G"] <= 4 and result["device"] == "cpu"
    # metrics.json holds the scores only: the same seed writes the same file
    assert json.loads((tmp_path / "metrics.json").read_text()) == {k: result[k] for k in scores}
    assert (tmp_path / "model.pt").exists() and (tmp_path / "embedding.npz").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--method", "basis", "--dataset", "two_moons", "--set", "graph.k=3"], "unknown key 'graph.k'"),
        (["--method", "specnet2", "--dataset", "two_moons", "--set", "anchors=random"], "unknown key 'anchors'"),
        (
            ["--method", "basis", "--dataset", "two_moons", "--set", "graph.n_neighbors=600"],
            "must be smaller than batch_size",
        ),
        (["--method", "basis", "--dataset", "two_moons", "--set", "graph.kernel=box"], "kernel must be one of"),
    ],
)
def test_run_rejects_bad_settings_with_a_clear_message(args, message):
    done = _basis("run", *args, "--device", "cpu")
    assert done.returncode == 2
    assert message in done.stderr


def test_stored_reference_is_reused_and_checked(tmp_path):
    ref = tmp_path / "ref.npz"
    done = _basis("reference", "--dataset", "blobs", "--out", str(ref), "--json", "--device", "cpu")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["n_components"] == 4
    common = [
        "run",
        "--method",
        "basis",
        "--dataset",
        "blobs",
        "--json",
        "--device",
        "cpu",
        "--reference",
        str(ref),
        "--set",
        "n_iter=20",
        "--set",
        "batch_size=128",
        "--set",
        "eval.authors_probe_epochs=1",
        "--set",
        "anchors_per_class=5",
    ]
    done = _basis(*common)
    assert done.returncode == 0, done.stderr
    assert 0 <= json.loads(done.stdout)["d_G"] <= 4
    # a run whose graph differs from the stored reference's is refused before training
    done = _basis(*common, "--set", "graph.n_neighbors=20")
    assert done.returncode == 2 and "was computed with" in done.stderr and "train_seconds" not in done.stdout
    # so is one on other points (same size, other data seed)
    done = _basis(*common, "--data-seed", "1")
    assert done.returncode == 2 and "test_inputs" in done.stderr
    # the training seed does not change the data, so the reference still applies
    done = _basis(*common, "--seed", "1")
    assert done.returncode == 0, done.stderr


def test_download_summarises_a_data_set(tmp_path):
    done = _basis("download", "--dataset", "digits", "--out", str(tmp_path / "digits.json"), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "digits.json").read_text())
    assert summary["n_train"] + summary["n_test"] == 1797 and summary["shape"] == [1, 8, 8]


def test_run_rejects_unknown_dataset_listing_choices():
    done = _basis("run", "--method", "basis", "--dataset", "imagenet")
    assert done.returncode == 2 and "three_moons" in done.stderr


@pytest.fixture
def workdir(tmp_path):
    return copy_workflow(tmp_path, ("Snakefile", "workflow", "config"))


# 4 data sets x 6 methods (the published SpectralNet twice) x 10 seeds, plus per data set
# its download, feature network and reference embedding, one experiment set-up and one
# table; digits is downloaded and gets features for the variants study beyond the paper.
EXPECTED_JOBS = {
    "download": "5",
    "tracking_setup": "1",
    "siamese_features": "5",
    "reference_embedding": "4",
    "train_and_evaluate": "24",  # 4 data sets x 6 methods, each job its 10 seeds (seeds_in_one_job)
    "knn_run": "24",
    "ablation_run": "30",
    "table1": "1",
    "total": "136",
}


def test_a_bad_value_given_with_config_is_named_as_the_command_lines(workdir):
    """Snakemake reads `--config key=off` as the string 'off' (YAML's booleans are not its):
    the line names --config, not the config file, and says how a boolean is written there."""
    done = run_snakemake(workdir, "-n", "--config", "seeds_together=off")
    assert_refused(
        done,
        "--config seeds_together: 'off' is not one of ['auto', True, False]"
        " (a boolean is written True or False in --config)",
    )
    done = run_snakemake(workdir, "-n", "--config", "seeds=0")
    assert_refused(done, "--config seeds: 0 is less than the minimum of 1")


def test_dry_run_of_the_paper_config_lists_every_job(workdir):
    done = run_snakemake(workdir, "-n", "--quiet", "rules")
    assert done.returncode == 0, done.stderr
    counts = dict(
        line.split()
        for line in (done.stdout + done.stderr).splitlines()
        if line.split() and len(line.split()) == 2 and line.split()[0] in EXPECTED_JOBS
    )
    assert counts == EXPECTED_JOBS


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/quick.yaml"])
def test_every_output_of_every_job_is_kept_until_its_job_succeeds(workdir, configfile):
    """update(): Snakemake does not delete a job's earlier outputs before it runs, and
    restores them if it fails (the restore itself: test_workflow_e2e.py)."""
    done = run_snakemake(workdir, "-n", "--configfile", configfile)
    assert done.returncode == 0, done.stderr
    outputs = [line.split(":", 1)[1] for line in done.stdout.splitlines() if line.startswith("    output:")]
    assert len(outputs) > 40
    files = [name.strip() for line in outputs for name in line.split(",")]
    assert [name for name in files if not name.endswith(" (update)")] == []


def test_bad_config_stops_before_any_job(workdir):
    config = (workdir / "config" / "config.yaml").read_text().replace("seeds: 10", "seeds: ten", 1)
    (workdir / "config" / "config.yaml").write_text(config)
    done = run_snakemake(workdir, "-n")
    # the file, the key path, what was expected and what was given, in one line (not the schema)
    assert_refused(done, "config config/config.yaml: seeds: 'ten' is not of type 'integer'")
    config = (workdir / "config" / "config.yaml").read_text().replace("seeds: ten", "seeds: 2\nbatchsize: 3", 1)
    (workdir / "config" / "config.yaml").write_text(config)
    done = run_snakemake(workdir, "-n")
    assert_refused(done, "'batchsize' was unexpected")


@pytest.mark.parametrize(
    "old, new, message",
    [
        (
            "n_neighbors: 50,",
            "n_neighbors: 600,",
            "protocol.graph.n_neighbors (600) must be smaller than protocol.batch_size (512)",
        ),
        (
            "basis: {anchors_per_class: 25}",
            "basis: {anchors_per_klass: 25}",
            "methods.basis or protocol: unknown key 'anchors_per_klass'",
        ),
        (
            "datasets: [mnist,",
            "datasets: [imagenet,",
            "datasets: 'imagenet' is neither a catalog data set nor declared",
        ),
        # data sets of one's own: a catalog name, an unknown key, a path that is not there
        (
            "datasets: [mnist,",
            "data_sources: {mnist: {path: config}}\ndatasets: [mnist,",
            "data_sources.mnist: 'mnist' is a data set of the catalog; give yours another name",
        ),
        ("datasets: [mnist,", "data_sources: {mine: {path: config, colour: true}}\ndatasets: [mnist,", "'colour'"),
        (
            "datasets: [mnist,",
            "data_sources: {mine: {path: data/mine.csv}}\ndatasets: [mine, mnist,",
            "data_sources.mine.path data/mine.csv: does not exist",
        ),
        ("  specnet2: {}", "  specnet3: {}", "specnet3"),
        # the values the jobs would use, checked as the jobs take them
        (
            "settings: {evaluation: ours}",
            "settings: {evaluation: ours, n_iter: 0}",
            "experiments.ablation.settings: n_iter=0 is out of range",
        ),
        (
            "features_dir: results/features}",
            "features_dir: results/features, protocol: {n_itre: 3}}",
            "experiments.variants.settings.protocol: unknown key 'n_itre'",
        ),
        ("seeds: 10\n", "seeds: 1000000000000\n", "seeds: 1000000000000 is greater than the maximum of 1000"),
        (
            "anchors_per_class: 25,",
            "classes: [4, 7, 11], anchors_per_class: 25,",
            "classes [11] are not labels of mnist",
        ),
    ],
)
def test_inconsistent_config_stops_before_any_job(workdir, old, new, message):
    path = workdir / "config" / "config.yaml"
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    done = run_snakemake(workdir, "-n")
    assert_refused(done, message)
    assert not (workdir / "results").exists()  # nothing ran


def _write_config(workdir, edit):
    import yaml

    config = yaml.safe_load((ROOT / "tests" / "configs" / "tiny.yaml").read_text())
    edit(config)
    path = workdir / "narrow.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_config_on_the_command_line_replaces_the_default_and_runs_only_what_it_states(workdir):
    def one_method(config):
        config["methods"] = {"basis": {"anchors_per_class": 10}}
        config["experiments"]["knn"]["methods"] = ["basis"]

    done = run_snakemake(workdir, "-n", "--quiet", "rules", "--configfile", _write_config(workdir, one_method))
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    counts = dict(line.split() for line in output.splitlines() if len(line.split()) == 2 and line.split()[1].isdigit())
    assert counts["train_and_evaluate"] == "2"  # basis x 2 seeds: nothing merged in from config/config.yaml
    assert counts["knn_run"] == "2"
    assert "is extended" not in output


@pytest.mark.parametrize("section", ["protocol", "features", "experiments.bunny", "protocol.lr", "ablation"])
def test_a_config_missing_a_section_is_refused_naming_it(workdir, section):
    def drop(config):
        *parents, key = section.split(".")
        holder = config["experiments"] if key == "ablation" else config
        for parent in parents:
            holder = holder[parent]
        del holder[key]

    done = run_snakemake(workdir, "-n", "--configfile", _write_config(workdir, drop))
    if section == "experiments.bunny":  # a study's section: checked against basis/studies/ rather than the schema
        assert_refused(done, "experiments has no section for the studies ['bunny']")
    else:
        assert_refused(done, f"'{section.split('.')[-1]}' is a required property")
    assert not (workdir / "results").exists()


def test_a_config_key_given_twice_is_refused_naming_it_and_its_lines(workdir):
    path = Path(_write_config(workdir, lambda config: None))
    text = path.read_text()
    path.write_text(text + "seeds: 3\n")  # a second seeds: the YAML loader would keep this one
    done = run_snakemake(workdir, "-n", "--configfile", str(path))
    first = next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith("seeds:"))
    assert_refused(done, f"key 'seeds' is given twice, on lines {first} and {len(text.splitlines()) + 1}")
    assert not (workdir / "results").exists()


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("methods.basis", "n_iter", -5, "n_iter=-5 is out of range: expected >= 1"),
        ("methods.basis", "anchor_outliers", 1.5, "anchor_outliers=1.5 is out of range: expected in [0, 1)"),
        ("methods.basis", "ransac_confidence", 1.5, "ransac_confidence=1.5 is out of range"),
        # the graph's own check (GraphConfig), the one statement of its choices and ranges
        ("protocol.graph", "neighbors", "annoy", "neighbors must be one of ['exact', 'faiss-ivf', 'faiss-hnsw']"),
        ("protocol.graph", "faiss_probe", 0, "faiss_probe must be a positive integer or null, got 0"),
    ],
)
def test_a_config_setting_out_of_range_is_refused_by_a_dry_run(workdir, section, key, value, message):
    def bad(config):
        holder = config
        for part in section.split("."):
            holder = holder.setdefault(part, {})
        holder[key] = value

    done = run_snakemake(workdir, "-n", "--configfile", _write_config(workdir, bad))
    assert_refused(done, message)
    assert not (workdir / "results").exists()


@pytest.mark.parametrize(
    "edits, message",
    [
        ({"seeds_together": True}, "config: seeds_together: true needs seeds_in_one_job: true"),
        ({"seeds_together": "maybe"}, "seeds_together: 'maybe' is not one of ['auto', True, False]"),
        (
            {"seeds_together": True, "seeds_in_one_job": True, "methods": {"specnet2": {"gradient": "neighbor"}}},
            "config: seeds_together: true, but specnet2 cannot train its seeds together: with gradient='neighbor'",
        ),
    ],
)
def test_seeds_together_is_refused_where_it_cannot_apply(workdir, edits, message):
    def together(config):
        config.update(edits)  # the tiny config trains one seed per job

    done = run_snakemake(workdir, "-n", "--configfile", _write_config(workdir, together))
    assert_refused(done, message)
    assert not (workdir / "results").exists()


def test_a_fixed_kernel_scale_needs_sigma(workdir):
    def fixed(config):
        config["protocol"]["graph"]["scale"] = "fixed"

    done = run_snakemake(workdir, "-n", "--configfile", _write_config(workdir, fixed))
    assert_refused(done, "'sigma' is a required property")


NEW_STUDY = """
from basis.studies import Figure, Study


def noise_level(*, n_points: int = 10, scale: float = 1.0, seed: int = 0):
    import numpy as np

    values = np.random.default_rng(seed).normal(0, scale, n_points)
    return {"spread": float(values.std())}, {"values": values}


def draw_noise(folders, out):
    from basis.studies.figures import load_study, plt, save_figure

    fig, ax = plt.subplots()
    for folder in folders:
        ax.hist(load_study(folder)[1]["values"])
    save_figure(fig, out)


def noise_claims(results):
    return [
        {"claim": f"noise {run}", "criterion": "> 0", "measured": str(r["spread"]), "reproduced": r["spread"] > 0}
        for run, r in results.items()
    ]


STUDY = Study(
    function="noise_level",
    runs=("small", "large"),
    figures=(Figure(name="fig9_noise", draw="draw_noise", caption="Fig. 9, noise."),),
    claims="noise_claims",
)
"""


def _new_study(workdir, section=True):
    """The workflow folder with one more study module, and a config with or without its section."""
    if not (workdir / "basis").exists():
        shutil.copytree(ROOT / "basis", workdir / "basis", ignore=shutil.ignore_patterns("__pycache__"))
        (workdir / "basis" / "studies" / "noise.py").write_text(NEW_STUDY)

    def add_section(config):
        if section:
            config["experiments"]["noise"] = {"settings": {"n_points": 200}, "small": {"scale": 0.1}, "large": {}}

    return _write_config(workdir, add_section)


def test_a_new_study_is_one_module_and_one_config_section(workdir):
    """A module in basis/studies/ and a config section are all a study needs: the workflow
    gives it a rule with a job per run, its figure and its rows in the comparison; without
    the section, the config is refused naming the study."""
    config = _new_study(workdir)
    done = run_snakemake(workdir, "-n", "--configfile", config)  # the default target: all
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    for expected in (
        "rule study_noise:",
        "results/studies/noise/small/metrics.json",
        "results/studies/noise/large/metrics.json",
        "rule figure_fig9_noise:",
    ):
        assert expected in output, expected
    done = run_snakemake(workdir, "-n", "--configfile", _new_study(workdir, section=False))
    assert_refused(done, "experiments has no section for the studies ['noise']")


def test_seeds_in_one_process_give_the_files_and_runs_of_one_process_per_seed(tmp_path):
    common = ["run", "--method", "basis", "--dataset", "two_moons", "--set", "n_iter=20", "--json"]
    store = tmp_path / "store"
    tracked = ["--track", "seeds", "--store", str(store), "--tag", "rule=train_and_evaluate"]
    for seed in (0, 1):
        done = _basis(*common, "--seed", str(seed), "--out", str(tmp_path / f"alone{seed}"))
        assert done.returncode == 0, done.stderr
    done = _basis(*common, *tracked, "--seeds", "0", "1", "--out", str(tmp_path / "together{seed}"))
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)["seeds"]
    for seed in (0, 1):
        alone, together = tmp_path / f"alone{seed}", tmp_path / f"together{seed}"
        assert (together / "metrics.json").read_bytes() == (alone / "metrics.json").read_bytes()
        with np.load(alone / "embedding.npz") as a, np.load(together / "embedding.npz") as b:
            assert all(np.array_equal(a[k], b[k]) for k in ("test", "reference", "labels"))
        assert printed[str(seed)]["d_G"] == json.loads((alone / "metrics.json").read_text())["d_G"]
    from basis.tracking import client

    runs = client(store).search_runs([client(store).get_experiment_by_name("seeds").experiment_id])
    by_seed = {run.data.tags["seed"]: run for run in runs}
    assert sorted(by_seed) == ["0", "1"]
    for seed, run in by_seed.items():
        assert run.info.run_name == f"two_moons-basis-seed{seed}" and run.info.status == "FINISHED"
        assert run.data.tags["rule"] == "train_and_evaluate"
        exact = json.loads((tmp_path / f"alone{seed}" / "metrics.json").read_text())["d_G"]
        assert run.data.metrics["eval/d_G"] == float(f"{exact:.4g}")  # MLflow shows four digits


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seeds", "0", "1", "--out", "results/x"], "needs {seed}"),
        (["--seeds", "1", "1", "--out", "results/seed{seed}"], "lists a seed twice"),
        (["--seeds", "0", "-3"], "--seeds"),
    ],
)
def test_bad_seed_lists_are_refused_before_any_work(tmp_path, args, message):
    done = _basis("run", "--method", "basis", "--dataset", "two_moons", *args)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (ROOT / "results" / "x").exists()


# A job of two runs (runs_in_one_job), and its second run as the workflow's job of that one
# run: the same command but for the runs it lists; the run's tags as the workflow gave them.
# (The first run of a shared process has nothing before it; the second shows what leaks.)
RUNS_SHARING_A_PROCESS = {
    "study": (
        ["study", "toy", "--set", "n_iter=5", "--set", "n_samples=600", "--set", "grid_size=20"],
        ["--datasets", "circles", "blobs", "--out", "{out}/{{dataset}}"],
        ["--datasets", "blobs", "--out", "{out}/{{dataset}}"],
        "blobs",
        {"study": "toy", "seed": "0", "run": "blobs", "variant": "toy-blobs"},
        "toy-seed0 (toy-blobs)",
    ),
    "ablation": (
        ["run", "--method", "basis", "--dataset", "two_moons", "--set", "n_iter=10", "--seeds", "0"],
        ["--variants", "lstsq", "ransac-outliers", "--outlier-fraction", "0.2", "--out", "{out}/{{variant}}/seed0"],
        ["--variants", "ransac-outliers", "--outlier-fraction", "0.2", "--out", "{out}/{{variant}}/seed0"],
        "ransac-outliers",
        {
            "dataset": "two_moons",
            "method": "basis",
            "seed": "0",
            "alignment": "ransac-outliers",
            "variant": "alignment-ransac-outliers",
        },
        "two_moons-basis-seed0 (alignment-ransac-outliers)",
    ),
}


@pytest.mark.parametrize("family", sorted(RUNS_SHARING_A_PROCESS))
def test_runs_in_one_process_give_the_files_and_mlflow_runs_of_one_process_per_run(tmp_path, family):
    """What runs_in_one_job's jobs run: each run's files byte for byte, and its MLflow run
    named and tagged as the workflow's job of that one run is."""
    common, shared, alone, second, tags, run_name = RUNS_SHARING_A_PROCESS[family]
    folders = {way: tmp_path / way for way in ("shared", "alone")}
    stores = {way: tmp_path / f"store-{way}" for way in folders}
    arguments = {"shared": shared, "alone": alone}
    for way, folder in folders.items():
        tracked = ["--track", family, "--store", str(stores[way]), "--json"]
        done = _basis(*common, *tracked, *[a.format(out=folder) for a in arguments[way]])
        assert done.returncode == 0, done.stderr
    shared_files, alone_files = (
        {p.relative_to(f): p.read_bytes() for p in f.rglob("*") if p.is_file()} for f in folders.values()
    )
    assert len(shared_files) == 2 * len(alone_files) >= 4 and {p.parts[0] for p in alone_files} == {second}
    assert {path: data for path, data in shared_files.items() if path.parts[0] == second} == alone_files
    from basis.tracking import client

    def runs(store):
        found = client(store).search_runs([client(store).get_experiment_by_name(family).experiment_id])
        return sorted((r.info.run_name, r.info.status, *(r.data.tags.get(k) for k in tags)) for r in found)

    shared_runs, (alone_run,) = runs(stores["shared"]), runs(stores["alone"])
    assert alone_run == (run_name, "FINISHED", *tags.values())
    assert len(shared_runs) == 2 and shared_runs.count(alone_run) == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["study", "toy", "--datasets", "circles", "blobs", "--out", "results/x"], "needs {dataset}"),
        (["study", "toy", "--datasets", "blobs", "blobs", "--out", "results/x/{dataset}"], "lists a data set twice"),
        (
            ["study", "toy", "--datasets", "blobs", "--set", 'dataset="circles"', "--out", "results/x"],
            "name the data set twice",
        ),
        (["study", "bunny", "--datasets", "blobs", "--out", "results/x"], "does not run per data set"),
        (["study", "toy", "--datasets", "digits", "--out", "results/x"], "digits"),
        (
            ["run", "--method", "basis", "--dataset", "blobs", "--variants", "lstsq", "none", "--out", "results/x"],
            "needs {variant}",
        ),
        (["run", "--method", "basis", "--dataset", "blobs", "--variants", "none", "none"], "lists a variant twice"),
        (["run", "--method", "basis", "--dataset", "blobs", "--variants", "none-outliers"], "need --outlier-fraction"),
        (["run", "--method", "basis", "--dataset", "blobs", "--outlier-fraction", "0.2"], "belongs to --variants"),
        (
            [
                "run",
                "--method",
                "basis",
                "--dataset",
                "blobs",
                "--variants",
                "lstsq-outliers",
                "--outlier-fraction",
                "2",
            ],
            "anchor_outliers=2",
        ),
        (["run", "--method", "basis", "--dataset", "blobs", "--variants", "spectral"], "invalid choice"),
    ],
)
def test_bad_run_lists_are_refused_before_any_work(args, message):
    done = _basis(*args)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (ROOT / "results" / "x").exists()


def test_the_slurm_profile_sends_each_seeds_job_on_its_own(workdir):
    """With seeds_in_one_job a kNN-sweep job already holds its k's seeds: grouping those jobs
    as well would run the whole sweep in one allocation, one k after another."""
    done = run_snakemake(workdir, "-n", "--profile", str(ROOT / "profiles/slurm"), "--configfile", "config/quick.yaml")
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert "Group job" not in output and "rule knn_run:" in output


def _probed(setup: str, marks: Path, args: list[str]) -> subprocess.CompletedProcess:
    """``python -m basis ARGS``, run in a probe whose ``__main__`` first runs ``setup``, which
    leaves its notes in the folder ``marks`` (also the command's working folder)."""
    probe = "\n".join(
        [
            "import sys",
            "marks = sys.argv[1]",
            setup,
            "import runpy",
            "sys.argv = ['basis', *sys.argv[2:]]",
            "runpy.run_module('basis', run_name='__main__')",
        ]
    )
    return subprocess.run(
        [sys.executable, "-c", probe, str(marks), *args],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        cwd=marks,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


_TEARDOWN_PROBE = """
import atexit, os
class Teardown:  # freed, with __main__'s globals, only by the interpreter's teardown
    def __del__(self, touch=os.open, close=os.close, flags=os.O_CREAT | os.O_WRONLY, path=marks + "/teardown"):
        close(touch(path, flags))
teardown = Teardown()
atexit.register(lambda: open(marks + "/exit_handlers", "w").close())
"""


@pytest.mark.parametrize(
    "args, code",
    [
        (["run", "--dataset", "two_moons", "--method", "basis", "--set", "n_iter=2", "--json"], 0),
        (["run", "--dataset", "two_moons", "--method", "basis", "--set", "n_iter=-1"], 2),
        (["run", "--method", "basis"], 2),  # argparse's usage error
    ],
)
def test_a_command_ends_after_its_exit_handlers_without_the_interpreters_teardown(tmp_path, args, code):
    """Freeing torch, scikit-learn and MLflow module by module took 1-2 s at the end of every
    job; `python -m basis` now ends once its exit handlers have run and its output is
    flushed, with the same exit code and the whole output."""
    done = _probed(_TEARDOWN_PROBE, tmp_path, args)
    assert done.returncode == code, done.stderr
    assert (tmp_path / "exit_handlers").exists()
    assert not (tmp_path / "teardown").exists()
    if code == 0:
        assert "acc" in json.loads(done.stdout.strip().splitlines()[-1])


def test_under_a_profiler_a_command_exits_normally_so_that_the_profile_is_written(tmp_path):
    profile = tmp_path / "run.prof"
    done = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "basis", "run", "--method", "basis"],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        cwd=ROOT,
    )
    assert "error: give --dataset" in done.stderr  # (cProfile drops the exit code)
    assert profile.stat().st_size > 0


_IMPORTS_PROBE = """
import atexit
def note():
    open(marks + "/imported", "w").write(" ".join(m for m in ("torch", "sklearn") if m in sys.modules))
atexit.register(note)
"""


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--dataset", "two_moons", "--method", "basis", "--set", "n_iter=-1"],
        ["reference", "--dataset", "two_moons", "--out", "reference.npz", "--set", "graph.n_neighbors=0"],
        ["study", "toy", "--out", "toy", "--set", "no_such_setting=1"],
    ],
)
def test_a_bad_setting_is_refused_before_torch_or_scikit_learn_is_imported(tmp_path, args):
    """Checking a command's settings and outputs needs neither: a bad one is refused in a
    fraction of a second (it took 4 s, importing both first)."""
    done = _probed(_IMPORTS_PROBE, tmp_path, args)
    assert done.returncode == 2 and done.stderr.startswith("error: "), done.stderr
    assert (tmp_path / "imported").read_text() == ""
