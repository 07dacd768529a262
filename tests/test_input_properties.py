"""One property per input family, drawn beyond the hand-picked cases of
test_input_families.py: own data (tables, through the commands that take a data set), stores
(every URI form the docs list, and broken ones) and study settings (sizes, limits, lists of
every study). Whatever is drawn, the answer is the one the README promises: it is accepted,
or refused with exit status 2 (an InputError) and one line, writing nothing; never a
traceback. (Interrupted workflows: tests/test_tracking.py, Ctrl-C and SIGTERM.)"""

import contextlib
import io
import math
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from basis.cli import launcher
from basis.errors import InputError
from basis.plan.registry import check_study_settings, study_names, study_parameters
from basis.runtime.stores import check_tracking_uri

#: Every family draws this many members per run of the suite (a fixed seed: the same ones).
MEMBERS = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _answer(argv: list[str], folder: Path) -> tuple[int, list[str]]:
    """``python -m basis ARGV`` in ``folder``, in this process: its status and stderr lines."""
    err, previous = io.StringIO(), os.getcwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = launcher.run_command(argv)
    finally:
        os.chdir(previous)
    return code, [line for line in err.getvalue().splitlines() if line.strip()]


CELLS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=32).map(repr),
    st.integers(-(10**20), 10**20).map(str),
    st.sampled_from(["", "cat", "1e400", "nan", " ", '"', "1,5", "0x10"]),
)
HEADERS = st.lists(st.sampled_from(["a", "b", "c", "label", "kind", "", "x y", "a"]), min_size=1, max_size=4)


@st.composite
def tables(draw):
    header = draw(HEADERS)
    width = st.integers(len(header) - 1, len(header) + 1) if draw(st.booleans()) else st.just(len(header))
    rows = draw(st.lists(width.flatmap(lambda n: st.lists(CELLS, min_size=max(n, 0), max_size=max(n, 0))), max_size=8))
    label = draw(st.sampled_from([None, *header, "missing"]))
    components = draw(st.sampled_from([None, 0, 1, 2, 50]))
    return header, rows, label, components


@MEMBERS
@given(table=tables())
def test_a_drawn_table_is_summarised_or_refused_in_one_line_writing_nothing(table):
    header, rows, label, components = table
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "t.csv").write_text("\n".join(",".join(row) for row in [header, *rows]) + "\n")
        before = _files(folder)
        argv = ["download", "--data", "t.csv"]
        argv += ["--label-column", label] if label is not None else []
        argv += ["--n-components", str(components)] if components is not None else []
        code, lines = _answer(argv, folder)
        assert code in (0, 2), (table, lines)
        if code == 2:
            assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in lines[0], (table, lines)
            assert _files(folder) == before


HOSTS = st.sampled_from(["127.0.0.1:9", "localhost:9", "[::1]:9", "alice:s3cret@127.0.0.1:9", "", "127.0.0.1:99999"])
PATHS = st.sampled_from(["", "/", "/x.db", "//tmp/nowhere/x.db", "//proc/x.db", "/db?password=p", "/%zz", "/a b"])


@MEMBERS
@given(scheme=st.sampled_from(["http", "https", "sqlite", "file", "postgresql", "mysql", "mssql", "banana", ""]),
       host=HOSTS, path=PATHS, writes=st.booleans())  # fmt: skip
def test_a_drawn_store_uri_is_accepted_or_refused_in_one_line_without_its_credentials(scheme, host, path, writes):
    uri = f"{scheme}://{host}{path}" if scheme else f"{host}{path}"
    try:
        check_tracking_uri(uri, writes=writes)
    except InputError as err:
        assert "\n" not in str(err) and "s3cret" not in str(err), uri


def _values():
    """Any value a YAML config can hold, the absurd ones first."""
    scalars = st.one_of(
        st.integers(-(10**13), 10**13),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.none(),
        st.text(max_size=5),
    )
    return st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=3), scalars, max_size=2))


@st.composite
def study_settings(draw):
    name = draw(st.sampled_from(study_names()))
    keys = draw(st.lists(st.sampled_from(study_parameters(name)), max_size=3, unique=True))
    return name, {key: draw(_values()) for key in keys}


@MEMBERS
@given(drawn=study_settings())
def test_drawn_study_settings_are_accepted_or_refused_in_one_line(drawn):
    name, values = drawn
    try:
        check_study_settings(name, values)
    except InputError as err:
        assert "\n" not in str(err), drawn
        return
    for value in values.values():  # accepted: no NaN, no non-positive limit in seconds
        numbers = value if isinstance(value, list) else [value]
        assert not any(isinstance(v, float) and not math.isfinite(v) for v in numbers), drawn
