"""The layout's boundaries: the core subpackages import no gymnasium or matplotlib, generic
modules no task, no module uses another's private names, no import cycle, no module over 500
lines."""

import ast
import subprocess
import sys
from pathlib import Path

import nopg


def _imported(modules: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules starting with ``prefixes`` that ``import <modules>`` loads in a fresh process."""
    code = (
        "import sys\n"
        f"import {modules}\n"
        f"print(','.join(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [m for m in out.stdout.strip().split(",") if m]


CORE = ("data", "model", "linalg", "policies", "train", "select", "bandwidth")
"""The library's core subpackages (the import-linter contracts in ``pyproject.toml`` name the same)."""


def _modules_of(packages: tuple[str, ...]) -> list[str]:
    root = Path(nopg.__file__).resolve().parent
    return sorted(_module_name(p) for name in packages for p in (root / name).rglob("*.py"))


def test_core_modules_do_not_import_gymnasium_or_matplotlib():
    """Every module of the core subpackages, loaded in a fresh process, leaves gymnasium and
    matplotlib out (import-linter checks the direct imports; this checks what they load)."""
    core = _modules_of(CORE) + ["nopg.validation", "nopg.analysis.estimators",
                                "nopg.analysis.statistics", "nopg.analysis.parallel",
                                "nopg.analysis.lqg_cases", "nopg.baselines.dynamics_ensemble"]
    assert "nopg.model.bellman" in core and "nopg.select.auto" in core and len(core) > 50
    bad = _imported("nopg, " + ", ".join(core), ("gymnasium", "matplotlib"))
    assert bad == [], f"importing the core modules pulled in: {bad}"


def test_generic_modules_import_no_task():
    """Evaluation, figures and the fit's plots know no environment (the pendulum's are apart)."""
    bad = _imported("nopg.envs.evaluation, nopg.viz.plots, nopg.viz.figures, "
                    "nopg.viz.policy_plots, nopg.viz.bandwidth_plots", ("nopg.envs", "nopg.experiments"))
    assert bad == ["nopg.envs", "nopg.envs.evaluation"], \
        f"generic modules pulled in task modules: {bad}"


SRC = Path(nopg.__file__).resolve().parent


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """``from <nopg module> import _name``, ``obj._name`` with ``obj`` not ``self``/``cls``, and
    ``getattr``/``setattr``/``hasattr`` of a private name given as a string."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level > 0 or (node.module or "").split(".")[0] == "nopg":
                found += [(node.lineno, f"from {node.module or '.'} import {a.name}")
                          for a in node.names if _is_private(a.name)]
        elif isinstance(node, ast.Attribute) and _is_private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append((node.lineno, ast.unparse(node)))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _is_private(node.args[1].value)):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_private_use_check_finds_every_form():
    code = ("from nopg.model.bellman import _DENSE_LIMIT\nfrom .data import _first_present\n"
            "import nopg.data.dataset as d\nd._first_present\nmodel._ilu\ngetattr(model, '_ilu')\n"
            "self._ilu\ncls._registry\nobj.__class__\nfrom numpy import _private_ok\n")
    lines = [line for line, _ in _private_uses(ast.parse(code))]
    assert lines == [1, 2, 4, 5, 6]


def test_no_module_uses_another_modules_private_names():
    """Private names (``_name``) stay inside their module and class: other modules and objects
    reach what they need through public functions, attributes and methods."""
    bad = [f"{path.relative_to(SRC.parent)}:{line}: {text}"
           for path in sorted(SRC.rglob("*.py"))
           for line, text in _private_uses(ast.parse(path.read_text(), str(path)))]
    assert bad == [], "private names used outside their owner:\n" + "\n".join(bad)


MAX_MODULE_LINES = 500


def test_no_module_is_longer_than_500_lines():
    """A module is read as a whole: one above 500 lines is split along its seams (the original
    module keeps importing the public names of the parts)."""
    bad = [f"{path.relative_to(SRC.parent)}: {n} lines" for path in sorted(SRC.rglob("*.py"))
           if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert bad == [], "modules above 500 lines (split them):\n" + "\n".join(bad)


MAX_FUNCTION_LINES = 60


def _code_lines(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of ``node`` that hold code: not its docstring, a comment or a blank line."""
    first = node.body[0]
    doc = set()
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        doc = set(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return sum(1 for i in range(node.lineno, (node.end_lineno or node.lineno) + 1)
               if i not in doc and lines[i - 1].strip() and not lines[i - 1].strip().startswith("#"))


def _long_functions(path: Path, limit: int) -> list[str]:
    text = path.read_text()
    lines = text.splitlines()
    return [f"{path}:{node.lineno} {node.name}: {n} lines"
            for node in ast.walk(ast.parse(text, str(path)))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (n := _code_lines(lines, node)) > limit]


def test_code_line_count_skips_docstrings_comments_and_blanks(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('def f():\n    """Doc\n    string."""\n    # note\n\n    x = 1\n    return x\n')
    assert _long_functions(source, 3) == []
    assert len(_long_functions(source, 2)) == 1


def test_no_function_is_longer_than_60_lines_of_code():
    bad = [entry for path in sorted(SRC.rglob("*.py"))
           for entry in _long_functions(path, MAX_FUNCTION_LINES)]
    assert bad == [], "functions above 60 lines of code (split them):\n" + "\n".join(bad)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path) -> set[str]:
    """The ``nopg`` modules ``path`` imports at run time (at the top or inside a function; not
    under ``if TYPE_CHECKING:``), each resolved to the module file (a name imported from a
    package's ``__init__`` counts as the package)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(), str(path))
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
            for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            if base.split(".")[0] != "nopg":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                is_module = (SRC.parent / (sub.replace(".", "/") + ".py")).exists() or \
                    (SRC.parent / sub.replace(".", "/")).is_dir()
                found.add(sub if is_module else base)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "nopg"}
    return found - {name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected part of ``graph`` with more than one module
    (Tarjan's algorithm, then a path back to the start inside the part)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    parts: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = set()
            while True:
                w = stack.pop()
                part.add(w)
                if w == v:
                    break
            if len(part) > 1:
                parts.append(part)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [sorted(p) for p in parts]


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_the_packages_modules():
    """No module imports (at run time, directly or through others) a module that imports it:
    package ``__init__`` files, which gather the public names, are left out of the graph."""
    modules = {_module_name(p): p for p in SRC.rglob("*.py") if p.name != "__init__.py"}
    graph = {m: {t for t in _runtime_imports(p) if t in modules} for m, p in modules.items()}
    assert graph["nopg.train.algorithm"] >= {"nopg.model.factory", "nopg.model.bellman"}  # read
    assert _cycles(graph) == [], f"import cycles: {_cycles(graph)}"


def test_the_layout_page_lists_every_module():
    """``docs/layout.md``'s tree names every module of the package, in its folder, and nothing
    that is gone."""
    page = (SRC.parents[1] / "docs" / "layout.md").read_text()
    tree = page.split("```\n")[1]
    listed, folders = set(), []
    for line in tree.splitlines():
        depth = (len(line) - len(line.lstrip())) // 2
        name = line.split()[0]
        folders = folders[:depth]
        if name.endswith("/"):
            folders.append(name[:-1])
        elif name.endswith(".py"):
            listed.add("/".join([*folders, name]))
    actual = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if p.name != "__init__.py"}
    assert listed == actual, (f"missing from docs/layout.md: {sorted(actual - listed)}; "
                              f"gone: {sorted(listed - actual)}")
