"""The house rules of docs/ARCHITECTURE.md, read from the imports (module level and inside
functions alike): layers import only downwards, no cycles, stages meet only at each other's
front door, the decode loops stay pure, and a function-level import is a lazy import of a heavy
dependency, never a way around a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "edgekit"

# (layer, rooms): a module belongs to the room with the longest matching prefix.
LAYERS: dict[int, tuple[str, ...]] = {
    1: ("edgekit", "edgekit.errors", "edgekit.spec", "edgekit.bundle", "edgekit.targets", "edgekit.host", "edgekit.arithmetic",
        "edgekit._deps", "edgekit._userhooks", "edgekit.output", "edgekit.vocabulary"),
    2: ("edgekit.models", "edgekit.runtimes"),
    3: ("edgekit.decode",),
    4: ("edgekit.probes", "edgekit.evaluate"),
    5: ("edgekit.export", "edgekit.quantize", "edgekit.check", "edgekit.debug", "edgekit.profile", "edgekit.builder", "edgekit.lint",
        "edgekit.deploy", "edgekit.doctor", "edgekit.run", "edgekit.inspect", "edgekit.stream", "edgekit.train"),
    6: ("edgekit.demo",),
    7: ("edgekit.cli", "edgekit.__main__"),
}
STAGES = LAYERS[5]
# Peers of one layer that may import each other, and why.
PEER_EDGES = {
    ("edgekit.runtimes", "edgekit.models"): "the torch reference backend rebuilds the module from the bundle's model source",
    ("edgekit.__main__", "edgekit.cli"): "`python -m edgekit` runs the CLI's entry point",
}
# What the decode loops may import: the hallway's data types and the Runtime protocol, nothing else.
DECODE_MAY_IMPORT = ("edgekit.errors", "edgekit.spec", "edgekit.runtimes.base", "edgekit.decode")
# Third-party packages whose import is heavy or optional: a function-level import of an edgekit
# module is allowed only when that module imports one of these at module level.
HEAVY = {"torch", "onnx", "onnxruntime", "onnxruntime_qnn", "onnxscript", "tensorrt", "cuda", "openvino", "matplotlib",
         "safetensors", "pynvml"}
MAX_LINES = 400
LONG_FILES: dict[str, str] = {
    # path relative to edgekit/: why it is still longer
}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _room(module: str) -> tuple[int, str]:
    best = max((room for rooms in LAYERS.values() for room in rooms if module == room or module.startswith(room + ".")),
               key=len)
    return next(layer for layer, rooms in LAYERS.items() if best in rooms), best


def _imports(module: str) -> list[tuple[str, int, bool, str]]:
    """(imported edgekit module, line, inside a function, source line) of every import in ``module``."""
    path = MODULES[module]
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    in_function = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function |= {id(sub) for sub in ast.walk(node) if sub is not node}
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] != "edgekit":
                continue
            target = _resolve(name)
            if target and target != module:
                out.append((target, node.lineno, id(node) in in_function, lines[node.lineno - 1]))
    return out


EDGES = {m: _imports(m) for m in MODULES}


def _top_level_heavy(module: str) -> bool:
    tree = ast.parse(MODULES[module].read_text())
    for node in tree.body:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(n.split(".")[0] in HEAVY for n in names):
            return True
    return False


def test_every_module_has_a_room():
    for module in MODULES:
        assert _room(module), module


def test_no_import_cycles():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, *_ in EDGES[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for module in MODULES:
        if module not in index:
            visit(module)
    assert cycles == []


def test_layers_import_only_downwards():
    broken = []
    for module, edges in EDGES.items():
        layer, room = _room(module)
        for target, line, _, _ in edges:
            t_layer, t_room = _room(target)
            if t_layer > layer:
                broken.append(f"{module}:{line} (layer {layer}) imports {target} (layer {t_layer})")
            elif t_layer == layer and t_room != room and layer not in (1, 5) and (room, t_room) not in PEER_EDGES:
                broken.append(f"{module}:{line} imports its peer {target}")
    assert broken == []


def test_stages_meet_only_at_the_front_door():
    """A stage uses another stage's package (``edgekit.builder``) or its console ``render`` module,
    never the modules behind them."""
    broken = []
    for module, edges in EDGES.items():
        layer, room = _room(module)
        if room not in STAGES:
            continue
        for target, line, _, _ in edges:
            t_layer, t_room = _room(target)
            if t_room in STAGES and t_room != room and target not in (t_room, f"{t_room}.render"):
                broken.append(f"{module}:{line} reaches into {target}")
    assert broken == []


def test_decode_loops_know_only_the_runtime_protocol():
    broken = [f"{m}:{line} imports {t}" for m, edges in EDGES.items() if _room(m)[1] == "edgekit.decode"
              for t, line, _, _ in edges if not any(t == ok or t.startswith(ok + ".") for ok in DECODE_MAY_IMPORT)]
    assert broken == []


def test_function_level_imports_are_lazy_imports_of_heavy_modules():
    """Outside the CLI (which defers its stages for a fast ``--help``), an edgekit import inside a
    function must be of a module that imports a heavy dependency at module level, and say so."""
    broken = []
    for module, edges in EDGES.items():
        if _room(module)[1] == "edgekit.cli":
            continue
        for target, line, inside, text in edges:
            if inside and not (_top_level_heavy(target) and "# lazy:" in text):
                broken.append(f"{module}:{line}: {text.strip()}")
    assert broken == []


@pytest.mark.parametrize("path", sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")))
def test_files_are_readable_in_one_sitting(path):
    lines = len((PACKAGE / path).read_text().splitlines())
    if path in LONG_FILES:
        pytest.skip(f"{path}: {lines} lines ({LONG_FILES[path]})")
    assert lines <= MAX_LINES, f"{path} has {lines} lines; split it by concern"


def test_the_rules_see_a_broken_house():
    """The checks above would fail on a decode loop importing a stage and on a cycle."""
    edges = dict(EDGES)
    edges["edgekit.decode.masked"] = [*edges["edgekit.decode.masked"], ("edgekit.quantize", 1, False, "from edgekit.quantize import x")]
    edges["edgekit.errors"] = [*edges["edgekit.errors"], ("edgekit.cli", 1, False, "from edgekit.cli import app")]
    globals_backup = globals()["EDGES"]
    globals()["EDGES"] = edges
    try:
        with pytest.raises(AssertionError):
            test_decode_loops_know_only_the_runtime_protocol()
        with pytest.raises(AssertionError):
            test_layers_import_only_downwards()
        with pytest.raises(AssertionError):
            test_no_import_cycles()
    finally:
        globals()["EDGES"] = globals_backup


# Raw reads of the manifest dict (``bundle.manifest["engines"]``, ``.get``/``.setdefault``/``.pop``)
# outside the two modules that own it: stages ask the Bundle (batch, decode_defaults, engines,
# has(), ...), so a section's shape is said once. The ceiling only goes down.
MANIFEST_OWNERS = ("bundle.py", "manifest.py")
MAX_RAW_MANIFEST_READS = 1


def _raw_manifest_reads(source: str) -> list[int]:
    """Lines of ``source`` that subscript (or .get/.setdefault/.pop) an attribute named ``manifest``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript):
            target = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "setdefault", "pop"):
            target = node.func.value
        else:
            continue
        if isinstance(target, ast.Attribute) and target.attr == "manifest":
            lines.append(node.lineno)
    return sorted(lines)


def test_stages_read_the_manifest_through_the_bundle():
    reads = [f"{path.relative_to(PACKAGE).as_posix()}:{line}"
             for path in sorted(PACKAGE.rglob("*.py")) if path.relative_to(PACKAGE).as_posix() not in MANIFEST_OWNERS
             for line in _raw_manifest_reads(path.read_text())]
    assert len(reads) <= MAX_RAW_MANIFEST_READS, (
        f"{len(reads)} raw manifest reads (ceiling {MAX_RAW_MANIFEST_READS}); read through Bundle's accessors instead: "
        + ", ".join(reads))


def test_the_manifest_count_sees_a_raw_read():
    source = 'a = b.manifest["engines"]\nc = b.manifest.get("fused") or {}\nb.manifest.setdefault("x", {})[k] = 1\nd = b.decode_defaults\n'
    assert _raw_manifest_reads(source) == [1, 2, 3]


MAX_FUNCTION_LINES = {"edgekit.quantize": 80}


@pytest.mark.parametrize("room", sorted(MAX_FUNCTION_LINES))
def test_functions_stay_short_where_the_pipeline_grows(room):
    """quantize/ is one pipeline with profile hooks (issue #25): no step hides in a long function."""
    limit = MAX_FUNCTION_LINES[room]
    long = []
    for module, path in MODULES.items():
        if module != room and not module.startswith(room + "."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit:
                long.append(f"{module}.{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, f"functions over {limit} lines in {room}: {long}"
