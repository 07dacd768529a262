"""Bad input by family (output paths, numbers, stores, data files, processes): every member
each family generates is refused with exit status 2 and one line on stderr, without a
traceback, before any training step, writing nothing anywhere and opening no MLflow run.

The members are generated from the family's parts (suffixes, kinds of link, lengths,
non-finite and absurd numbers, URIs, label types) and run through ``basis.cli.main`` in
this process, so that the families stay within ``make test``'s time."""

import argparse
import http.server
import random
import socket
import ssl
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import refused

from basis.cli import launcher
from basis.runtime import inputs

COMMANDS_WITH_FILES = {  # command arguments before --out, and the suffix its --out must have
    "embed": (["embed", "--model", "model.pt", "--input", "X.npy"], ".npy"),
    "reference": (["reference", "--dataset", "blobs"], ".npz"),
    "features": (["features", "--dataset", "digits", "--set", "n_steps=1"], ".npz"),
    "figure": (["figure", "fig2_illustration", "--input", "toy"], ".png"),
}


@pytest.fixture
def folder(tmp_path):
    """A working folder holding the inputs the commands need (a model, points, a study)."""
    np.save(tmp_path / "X.npy", np.ones((4, 2)))
    (tmp_path / "toy").mkdir()
    np.savez(tmp_path / "toy" / "arrays.npz", x=np.ones(1))
    (tmp_path / "model.pt").write_bytes(b"")
    (tmp_path / "existing.npy").write_bytes(b"keep")
    return tmp_path


def _output_members(seed: int = 0) -> list[tuple[str, str, str]]:
    """(command, kind of bad --out, expected words): every suffix fault for every command,
    and a sample of the other kinds."""
    rng = random.Random(seed)
    members = []
    for command, (_, suffix) in COMMANDS_WITH_FILES.items():
        for bad in ("Y", "Y.txt", "Y" + (".npz" if suffix != ".npz" else ".npy")):
            members.append((command, bad, f"does not end in {suffix}"))
        members += [
            (command, "/dev/null", "not a regular file"),
            (command, "dangling", "dangling symbolic link"),
            (command, "link", "is a symbolic link"),
            (command, "long", "too long for the file system"),
            (command, "claimed", "being written by another basis command"),
        ]
    return rng.sample(members, k=len(members))


@pytest.mark.parametrize("command, kind, words", _output_members())
def test_a_bad_output_path_is_refused_at_the_door(folder, capsys, monkeypatch, command, kind, words):
    argv, suffix = COMMANDS_WITH_FILES[command]
    out = {
        "dangling": "dangling" + suffix,
        "link": "link" + suffix,
        "long": "x" * 300 + suffix,
        "claimed": "claimed" + suffix,
    }.get(kind, kind)
    if kind == "dangling":
        (folder / out).symlink_to(folder / "nowhere" / "missing")
    if kind == "link":
        (folder / out).symlink_to(folder / "existing.npy")
    if kind == "claimed":  # another command holds the output
        inputs.claim_output((folder / out).absolute())
    try:
        line = refused([*argv, "--out", out], folder, capsys, monkeypatch)
    finally:
        inputs.release_outputs()
    assert words in line, line
    assert (folder / "existing.npy").read_bytes() == b"keep"


def test_an_output_claim_leaves_no_lock_file_and_survives_a_release_between_open_and_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs.tempfile, "gettempdir", lambda: str(tmp_path))
    out = tmp_path / "run"
    inputs.claim_output(out)
    try:
        with pytest.raises(inputs.InputError, match="is being written by another basis command"):
            inputs.claim_output(out)
    finally:
        inputs.release_outputs()
    locks = tmp_path / f"basis-outputs-{inputs.os.getuid()}"
    assert list(locks.iterdir()) == []  # the lock file went with the release
    # The holder before us releases (removes the file) between our open and our lock: the
    # claim must lock the file that is there now, not the removed one.
    real_open, opened = inputs.os.open, []

    def open_then_released(path, *args):
        descriptor = real_open(path, *args)
        if not opened:
            inputs.os.unlink(path)
        opened.append(descriptor)
        return descriptor

    monkeypatch.setattr(inputs.os, "open", open_then_released)
    inputs.claim_output(out)
    try:
        assert len(opened) == 2
        (lock,) = locks.iterdir()
        assert inputs.os.fstat(inputs._claims[-1][0]).st_ino == lock.stat().st_ino
    finally:
        inputs.release_outputs()


NUMBERS = [
    ("lr", ["1e400", "nan", "-1e400", "1e30", "0", "-1"]),
    ("hidden", ["[-5]", "[0, 16]"]),
    ("batch_size", ["-3", "1"]),
    ("n_iter", ["0", "-10"]),
]


@pytest.mark.parametrize("key, value", [(key, value) for key, values in NUMBERS for value in values])
def test_a_number_that_means_nothing_is_refused_before_training(folder, capsys, monkeypatch, key, value):
    argv = ["run", "--method", "basis", "--dataset", "two_moons", "--set", f"{key}={value}", "--out", "out"]
    line = refused(argv, folder, capsys, monkeypatch)
    assert key in line


@pytest.mark.parametrize(
    "argv, words",
    [
        (["study", "toy", "--set", "n_samples=-1", "--out", "toy_out"], "n_samples"),
        (["study", "toy", "--set", "n_iter=0", "--out", "toy_out"], "n_iter"),
        (["study", "toy", "--set", "grid_size=0", "--out", "toy_out"], "grid_size=0"),
        (["study", "bunny", "--set", "resolution=-2", "--out", "toy_out"], "resolution=-2"),
        (["study", "feature_change", "--set", "eval_every=0", "--out", "toy_out"], "eval_every=0"),
        (["study", "alignment_error", "--set", "batch_sizes=[0, 250]", "--out", "toy_out"], "batch_sizes"),
        (["study", "toy", "--data", "x.npy", "--out", "o"], "then --datasets NAME --declaration SUMMARY.json"),
        (["study", "scale", "--set", "time_limit_s=-1", "--out", "o"], "time_limit_s=-1 is out of range"),
        (["study", "scale", "--set", "time_limit_s=0", "--out", "o"], "time_limit_s=0 is out of range"),
        (["study", "scale", "--set", "n_points=[]", "--out", "o"], "n_points=[] is empty"),
        (["study", "scale", "--set", "n_points=[1000000000000]", "--out", "o"], "for its points alone"),
        (["bench", "reference", "--n", "-5"], "--n -5"),
        (["bench", "step", "--k", "0"], "--k 0"),
        (["run", "--method", "basis", "--dataset", "two_moons", "--threads", "x", "--out", "o"], "invalid int"),
    ],
)
def test_counts_below_one_are_refused(folder, capsys, monkeypatch, argv, words):
    assert words in refused(argv, folder, capsys, monkeypatch)


@pytest.mark.parametrize(
    "study, settings, least",
    [
        ("toy", ["n_samples=5"], 333),  # three moons: 111 per moon, 67 held out, 266 >= 256 + 9 anchors
        ("toy", ["n_samples=332"], 333),
        ("toy", ["dataset=blobs", "n_samples=330"], 335),  # four classes: 12 anchors
        ("toy", ["batch_size=128", "n_samples=160"], 174),
        ("variants", ["dataset=two_moons", "n_samples=100"], 328),  # the toy protocol's batch of 256
    ],
)
def test_a_toy_set_too_small_for_a_batch_is_refused_naming_the_least_size(
    folder, capsys, monkeypatch, study, settings, least
):
    argv = ["study", study, *(arg for setting in settings for arg in ("--set", setting)), "--out", "o"]
    line = refused(argv, folder, capsys, monkeypatch)
    assert "n_samples" in line and f"expected n_samples >= {least}" in line


STORE_URIS = [
    ("banana", "not a tracking store URI"),
    ("postgresql://user@localhost/db", "needs the psycopg2 driver"),
    ("postgresql://user@127.0.0.1:9/db", "the database refuses the connection or does not answer"),
    ("http://127.0.0.1:9", "no tracking server answers"),
    ("sqlite:////nonexistent/dir/x.db", "does not exist"),
    ("file:///tmp", "MLflow keeps its file store for old runs only"),  # a form it listed as valid: a traceback
    ("sqlite:////proc/mlflow.db", "sqlite:////proc/mlflow.db: the folder /proc cannot be written"),  # read-only
]


def hide_a_missing_driver(monkeypatch, words: str) -> None:
    """Where a case is about a driver that is not installed, make it so: the test extra
    installs psycopg2 for the cases where a database server does not answer."""
    if "driver" in words:
        monkeypatch.setitem(sys.modules, "psycopg2", None)


@pytest.mark.parametrize("uri, words", STORE_URIS)
def test_a_store_uri_that_cannot_be_used_is_refused(folder, capsys, monkeypatch, uri, words):
    hide_a_missing_driver(monkeypatch, words)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    argv = ["run", "--method", "basis", "--dataset", "two_moons", "--track", "exp", "--out", "out"]
    assert words in refused(argv, folder, capsys, monkeypatch)
    assert not Path("/nonexistent").exists()


@pytest.mark.parametrize("as_uri", [False, True])
def test_a_store_another_process_holds_locked_is_refused_after_a_short_wait(folder, capsys, monkeypatch, as_uri):
    """An sqlite3 shell holding an exclusive lock: one line naming the lock after
    LOCK_WAIT_S, not MLflow's "database is locked" traceback; the store is left as it was."""
    import sqlite3

    from basis.runtime import stores

    store = folder / "store"
    store.mkdir()
    database = store / "mlflow.db"
    sqlite3.connect(database).execute("CREATE TABLE kept (x)").connection.close()
    before = database.read_bytes()
    monkeypatch.setattr(stores, "LOCK_WAIT_S", 0.5)
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        argv = ["run", "--method", "basis", "--dataset", "two_moons", "--track", "exp", "--out", "out"]
        if as_uri:
            monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{database}")
        else:
            argv += ["--store", str(store)]
        line = refused(argv, folder, capsys, monkeypatch)
    finally:
        holder.rollback()
        holder.close()
    assert "is locked by another process (waited 0.5 s)" in line
    assert f"sqlite:///{database}" in line if as_uri else f"--store {store}" in line
    assert database.read_bytes() == before


def _self_signed(folder: Path) -> ssl.SSLContext:
    """A TLS context with a certificate for 127.0.0.1 that no one signed (cryptography's)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + datetime.timedelta(1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    (folder / "cert.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    return context


class _NotMlflow(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_error(404)

    def log_message(self, *args):
        pass


@pytest.fixture
def odd_servers(tmp_path):
    """Three addresses that take a connection: one that never answers, one that answers 404
    to everything (a web server, not MLflow), one that speaks TLS with a self-signed
    certificate (404 once trusted)."""
    stalling = socket.create_server(("127.0.0.1", 0))  # its backlog takes the connection; no one reads it
    plain = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotMlflow)
    tls = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotMlflow)
    tls.socket = _self_signed(tmp_path).wrap_socket(tls.socket, server_side=True)
    for server in (plain, tls):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {
        "stalls": f"http://127.0.0.1:{stalling.getsockname()[1]}",
        "404": f"http://127.0.0.1:{plain.server_address[1]}",
        "self-signed": f"https://127.0.0.1:{tls.server_address[1]}",
        "certificate": str(tmp_path / "cert.pem"),
    }
    for server in (plain, tls):
        server.shutdown()
    stalling.close()


@pytest.mark.parametrize(
    "server, trust, words",
    [
        ("stalls", {}, "takes the connection but does not answer an MLflow request within 20 s"),
        ("404", {}, "answers, but not as an MLflow tracking server (HTTP 404"),
        ("self-signed", {}, "its TLS certificate is not trusted here; give its CA's certificate"),
        ("self-signed", {"MLFLOW_TRACKING_SERVER_CERT_PATH": "certificate"}, "not as an MLflow tracking server"),
        ("self-signed", {"MLFLOW_TRACKING_INSECURE_TLS": "true"}, "not as an MLflow tracking server"),
    ],
    ids=["stalls", "404", "self-signed", "its-certificate-given", "insecure-tls"],
)
def test_a_server_that_stalls_or_is_not_mlflow_is_refused_at_the_door(
    folder, capsys, monkeypatch, odd_servers, server, trust, words
):
    """It hung every command (the door only opened a TCP connection) or ended in 253 s of
    retries and a traceback; the door now makes the run's first request, as MLflow makes it."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", odd_servers[server])
    for name, value in trust.items():
        monkeypatch.setenv(name, odd_servers.get(value, value))
    argv = ["run", "--method", "basis", "--dataset", "two_moons", "--track", "exp", "--out", "out"]
    assert words in refused(argv, folder, capsys, monkeypatch)
    assert not (folder / "out").exists()


@pytest.mark.parametrize(
    "argv, words",
    [
        (["run", "--method", "basis", "--dataset", "two_moons", "--track", "", "--out", "o"], "--track is empty"),
        (["run", "--method", "basis", "--dataset", "two_moons", "--track", "e" * 1000, "--out", "o"], "experiment"),
        (["tracking", "close-stale", "--store", "X.npy"], "is a file"),
        (["tracking", "setup", "--store", "X.npy"], "is a file"),
        (["tracking", "setup", "--store", "s", "--flag", "/dev/null/x.json"], "--flag"),
        (["tracking", "setup", "--store", "s", "--experiment", ""], "--experiment is empty"),
    ],
)
def test_a_store_or_experiment_that_cannot_be_used_is_refused(folder, capsys, monkeypatch, argv, words):
    assert words in refused(argv, folder, capsys, monkeypatch)


def _features_file(folder: Path, **changes) -> str:
    rng = np.random.default_rng(0)
    arrays = {
        "X_train": rng.normal(size=(40, 3)),
        "y_train": np.arange(40) % 2,
        "X_test": rng.normal(size=(20, 3)),
        "y_test": np.arange(20) % 2,
        "dataset": np.array("digits"),
        "data_seed": np.array(0),
    }
    arrays.update(changes)
    np.savez(folder / "features.npz", **arrays)
    return "features.npz"


DATA_MEMBERS = [
    ({"y_train": np.array(["a", "b"] * 20)}, "integer class labels"),
    ({"y_train": np.zeros(40, dtype=int)}, "one class"),
    ({"X_train": np.zeros((40, 3))}, "is the same"),
    ({"data_seed": np.array("zero")}, "data_seed must be one integer"),
    ({"data_seed": np.arange(3)}, "data_seed must be one integer"),
    ({"X_train": np.array([["a", "b", "c"]] * 40)}, "expected numbers"),
]


@pytest.mark.parametrize("changes, words", DATA_MEMBERS)
def test_a_features_file_that_cannot_be_clustered_is_refused(folder, capsys, monkeypatch, changes, words):
    features = _features_file(folder, **changes)
    argv = ["run", "--method", "basis", "--dataset", "digits", "--features", features, "--out", "out"]
    assert words in refused(argv, folder, capsys, monkeypatch)


def test_a_reference_of_nans_and_a_checkpoint_of_nans_are_refused(folder, capsys, monkeypatch):
    import torch

    torch.save({"weights": torch.full((2, 2), float("nan"))}, folder / "nan.pt")
    argv = ["embed", "--model", "nan.pt", "--input", "X.npy", "--out", "Y.npy"]
    assert "NaN or infinite weights" in refused(argv, folder, capsys, monkeypatch)


def test_a_run_whose_loss_turns_non_finite_stops_at_once_with_one_line(folder, capsys, monkeypatch):
    """The loss read back at step 3 is NaN (a diverging run, made to order): the run stops
    there, exit 2, one line naming the step and lr; no step after it is taken."""
    from basis.estimators.base import SpectralEstimator

    steps = []
    train_step = SpectralEstimator._train_step

    def diverging(self, batch):
        loss, info = train_step(self, batch)
        steps.append(len(steps))
        return (loss * float("nan") if len(steps) > 3 else loss), info

    monkeypatch.setattr(SpectralEstimator, "_train_step", diverging)
    monkeypatch.chdir(folder)
    argv = ["run", "--method", "specnet1", "--dataset", "two_moons", "--set", "n_iter=200", "--out", "out"]
    assert launcher.run_command(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the job's progress lines
    assert last.startswith("error: training diverged: the loss is nan at step 3") and "lr=0.001" in last
    assert len(steps) < 200 and not (folder / "out").exists()


def test_a_non_finite_loss_is_refused_with_its_step():
    from basis.errors import TrainingDiverged
    from basis.estimators import make_estimator

    estimator = make_estimator("basis", n_components=2, lr=0.5)
    with pytest.raises(TrainingDiverged, match=r"the loss is nan at step 7 of BASiS \(lr=0.5\)"):
        estimator._check_loss(7, float("nan"))


def test_threads_beyond_the_cores_are_capped_with_one_line(folder, capsys, monkeypatch):
    from basis.runtime.threads import available_cores, limit_threads

    assert limit_threads(10_000) == available_cores()
    assert capsys.readouterr().err.count("\n") == 1


SECRET_URIS = [
    ("postgresql://alice:s3cret@localhost/db", "needs the psycopg2 driver", "postgresql://localhost/db"),
    ("postgresql://alice:s3cret@127.0.0.1:9/db", "the database refuses", "postgresql://127.0.0.1:9/db"),
    ("http://alice:s3cret@127.0.0.1:9", "no tracking server answers", "http://127.0.0.1:9"),
    ("banana://alice:s3cret@host/?token=s3cret", "not a tracking store URI", "banana://host/?token=***"),
]


@pytest.mark.parametrize("uri, words, shown", SECRET_URIS)
def test_a_refused_store_uri_is_named_without_its_credentials(folder, capsys, monkeypatch, uri, words, shown):
    hide_a_missing_driver(monkeypatch, words)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    argv = ["run", "--method", "basis", "--dataset", "two_moons", "--track", "exp", "--out", "out"]
    line = refused(argv, folder, capsys, monkeypatch)
    assert words in line and f"MLFLOW_TRACKING_URI {shown}" in line and "s3cret" not in line


def test_the_setup_flag_keeps_no_credentials_of_a_server(folder, monkeypatch):
    """tracking setup's flag file records the store (a server's URI): without its password."""
    from basis import tracking
    from basis.cli import commands

    monkeypatch.chdir(folder)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://alice:s3cret@127.0.0.1:5000")
    monkeypatch.setattr(tracking, "ensure_experiments", lambda names, store: {"basis-runs": "1"})
    args = argparse.Namespace(action="setup", experiment=None, store="s", flag="flag.json", json=False)
    assert commands.cmd_tracking(args) in (0, None)
    text = Path("flag.json").read_text()
    assert "s3cret" not in text and "alice" not in text and "http://127.0.0.1:5000" in text
