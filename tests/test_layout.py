"""The package's layout holds: no import circle, the machinery apart from the science, and
modules of a readable length."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "basis"
#: The science: what a researcher reuses, which needs neither the command line nor MLflow.
SCIENCE = ("graph", "spectral", "alignment", "models", "estimators", "metrics", "data", "features")
SCIENCE += ("approximate", "references", "experiment", "changing_features", "studies", "paper")
#: Longest module, in lines.
MAX_LINES = 505
#: Longest catalog: it lists what the code declares, and reads no source.
MAX_CATALOG_LINES = 250


def _modules() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports() -> dict[str, set[str]]:
    """Module -> the modules of ``basis`` it imports, at its top or inside a function."""
    modules = _modules()

    def owner(name: str) -> str:
        while name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                module = ".".join(base + [node.module] if node.module else base) if node.level else node.module
                if module and module.split(".")[0] == "basis":
                    found |= {owner(f"{module}.{alias.name}") for alias in node.names}
            elif isinstance(node, ast.Import):
                found |= {owner(alias.name) for alias in node.names if alias.name.split(".")[0] == "basis"}
        graph[name] = found - {name}
    return graph


#: A package's torch-free declarations, read by the catalog: a floor of their own below it.
DECLARATIONS = {"basis.estimators.parameters": "declarations"}


def _part(module: str) -> str:
    return DECLARATIONS.get(module) or (module.split(".")[1] if "." in module else "")


def test_no_import_runs_in_a_circle():
    graph = _imports()
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                raise AssertionError(f"import circle: {' -> '.join(path[path.index(target) :] + [target])}")
            if target not in state:
                visit(target, path + [target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_science_imports_neither_the_command_line_nor_tracking_and_runtime_imports_no_science():
    graph = _imports()
    for module, targets in graph.items():
        parts = {_part(target) for target in targets}
        if _part(module) in SCIENCE:
            assert not parts & {"cli", "tracking"}, f"{module} imports {sorted(targets)}"
        if _part(module) == "runtime":
            assert parts <= {"runtime", "errors"}, f"{module} imports {sorted(targets)}"


def test_no_module_is_longer_than_the_limit():
    lengths = {path.relative_to(ROOT.parent): len(path.read_text().splitlines()) for path in ROOT.rglob("*.py")}
    assert {path: n for path, n in lengths.items() if n > MAX_LINES} == {}
    assert lengths[Path("basis/catalog/__init__.py")] <= MAX_CATALOG_LINES


def test_the_catalog_reads_declarations_not_source():
    """The catalog and the plan learn what the code offers from the code's declarations
    (imported), never by parsing it: no ``ast``, no reading of a ``.py`` file. Only the code
    versions hash (and normalise) the source, which is what a rerun trigger is about."""
    readers = [*(ROOT / "catalog").glob("*.py"), *(ROOT / "plan").glob("*.py")]
    parsing = {
        str(path.relative_to(ROOT.parent))
        for path in readers
        if path.name != "versions.py" and re.search(r"^import ast|^from ast |\.read_text\(\)", path.read_text(), re.M)
    }
    assert parsing == set()


def _device_tests(tree: ast.AST) -> list[int]:
    """Lines that decide on the device themselves: ``torch.cuda`` used, ``.is_cuda`` read, a
    ``.type`` compared, a string compared with (or tested as the start of) "cuda" or "cpu"."""
    lines = []
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}  # is_cuda(...): the policy
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and (
            (node.attr == "is_cuda" and id(node) not in called)
            or (node.attr == "cuda" and isinstance(node.value, ast.Name) and node.value.id == "torch")
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(side, ast.Attribute) and side.attr == "type" for side in sides) or any(
                isinstance(side, ast.Constant) and side.value in ("cuda", "cpu") for side in sides
            ):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith":
            if any(isinstance(arg, ast.Constant) and str(arg.value).startswith(("cuda", "cpu")) for arg in node.args):
                lines.append(node.lineno)
    return lines


def test_only_the_runtime_decides_on_the_device():
    """Every decision that depends on the device goes through basis.runtime's device policy,
    so that its CUDA side can be run on the CPU (tests/test_cuda_side.py)."""
    offenders = {}
    for path in ROOT.rglob("*.py"):
        if path.relative_to(ROOT).parts[0] == "runtime":
            continue
        lines = _device_tests(ast.parse(path.read_text()))
        if lines:
            offenders[str(path.relative_to(ROOT.parent))] = lines
    assert offenders == {}


#: The package's floors, lowest first: a module imports only from its own floor or below.
FLOORS = (
    "errors",
    "choices",
    "runtime",
    "graph",
    "declarations",
    "catalog",
    "spectral",
    "alignment",
    "models",
    "metrics",
    "data",
    "estimators",
    "features",
    "approximate",
    "references",
    "experiment",
    "changing_features",
    "studies",
    "plan",
    "paper",
    "verdicts",
    "report",
    "tracking",
    "cli",
    "__main__",
)


def test_every_import_goes_down():
    graph = _imports()
    assert {_part(module) for module in graph} - {""} == set(FLOORS), "a new part of basis needs its floor"
    upward = {
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if _part(module) and FLOORS.index(_part(target)) > FLOORS.index(_part(module))
    }
    assert upward == set()


def test_no_module_name_stands_for_two_things():
    """A file name is used once in basis/ (a study and its data set, or its trainer, are
    named apart), so that a name in a traceback or an import says which one."""
    stems: dict[str, list[str]] = {}
    for path in ROOT.rglob("*.py"):
        if path.name != "__init__.py":
            stems.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    assert {stem: paths for stem, paths in stems.items() if len(paths) > 1} == {}


#: Longest function or method, in lines of code (docstrings, comments and blank lines aside;
#: a nested function counts in its parent too).
MAX_FUNCTION_LINES = 80


def _code_lines(lines: list[str], node: ast.AST) -> int:
    body = node.body
    docstring = range(0)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        docstring = range(body[0].lineno, body[0].end_lineno + 1)
    return sum(
        1
        for number in range(node.lineno, node.end_lineno + 1)
        if number not in docstring and lines[number - 1].strip() and not lines[number - 1].strip().startswith("#")
    )


def test_no_function_is_longer_than_the_limit():
    long = {}
    for path in ROOT.rglob("*.py"):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = _code_lines(source.splitlines(), node)
                if n > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT.parent)}:{node.name}"] = n
    assert long == {}


#: Hand-written lists of method names allowed besides the declarations: the scale study's
#: choices (its networks and its other curves, read as a ``Literal`` from its source).
METHOD_LIST_EXCEPTIONS = {"basis/studies/scale.py"}


def test_the_method_names_are_written_in_one_list():
    """Every list of methods is derived from the declarations
    (:mod:`basis.estimators.parameters`): a second hand-written one (two method names or more
    in one literal, BASiS's aside) in the package, the rules, the schema or the benchmarks fails here."""
    from basis.estimators.parameters import DECLARED

    names = set(DECLARED) - {"basis"}  # also the package's name: "python -m basis"
    found = []
    sources = [*ROOT.rglob("*.py"), *ROOT.parent.glob("workflow/**/*.py"), *ROOT.parent.glob("benchmarks/*.py")]
    for path in sorted(sources):
        relative = str(path.relative_to(ROOT.parent))
        if relative in ("basis/estimators/parameters.py", *METHOD_LIST_EXCEPTIONS):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else []
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                items = [ast.Constant(word) for word in node.value.split()]  # "basis specnet2"
            if sum(isinstance(i, ast.Constant) and i.value in names for i in items) >= 2:
                found.append(f"{relative}:{node.lineno}")
    for path in sorted(ROOT.parent.glob("workflow/**/*.smk")) + sorted(ROOT.parent.glob("workflow/schemas/*.yaml")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if len(names & set(re.findall(r"\w+", line))) >= 2:
                found.append(f"{path.relative_to(ROOT.parent)}:{number}")
    assert found == []
