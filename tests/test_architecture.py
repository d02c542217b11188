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
    1: (
        "edgekit",
        "edgekit.errors",
        "edgekit.spec",
        "edgekit.bundle",
        "edgekit.targets",
        "edgekit.host",
        "edgekit.arithmetic",
        "edgekit._deps",
        "edgekit._userhooks",
        "edgekit.output",
        "edgekit.vocabulary",
    ),
    2: ("edgekit.models", "edgekit.runtimes"),
    3: ("edgekit.decode",),
    4: ("edgekit.probes", "edgekit.evaluate"),
    5: (
        "edgekit.export",
        "edgekit.quantize",
        "edgekit.check",
        "edgekit.debug",
        "edgekit.profile",
        "edgekit.builder",
        "edgekit.lint",
        "edgekit.deploy",
        "edgekit.doctor",
        "edgekit.run",
        "edgekit.inspect",
        "edgekit.stream",
        "edgekit.train",
    ),
    6: ("edgekit.demo",),
    7: ("edgekit.cli", "edgekit.__main__"),
}
STAGES = LAYERS[5]
# Peers of one layer that may import each other, and why.
PEER_EDGES = {
    (
        "edgekit.runtimes",
        "edgekit.models",
    ): "the torch reference backend rebuilds the module from the bundle's model source",
    ("edgekit.__main__", "edgekit.cli"): "`python -m edgekit` runs the CLI's entry point",
}
# What the decode loops may import: the hallway's data types and the Runtime protocol, nothing else.
DECODE_MAY_IMPORT = ("edgekit.errors", "edgekit.spec", "edgekit.runtimes.base", "edgekit.decode")
# Third-party packages whose import is heavy or optional: a function-level import of an edgekit
# module is allowed only when that module imports one of these at module level.
HEAVY = {
    "torch",
    "onnx",
    "onnxruntime",
    "onnxruntime_qnn",
    "onnxscript",
    "tensorrt",
    "cuda",
    "openvino",
    "matplotlib",
    "safetensors",
    "pynvml",
}
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
    best = max(
        (room for rooms in LAYERS.values() for room in rooms if module == room or module.startswith(room + ".")),
        key=len,
    )
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
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
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
    broken = [
        f"{m}:{line} imports {t}"
        for m, edges in EDGES.items()
        if _room(m)[1] == "edgekit.decode"
        for t, line, _, _ in edges
        if not any(t == ok or t.startswith(ok + ".") for ok in DECODE_MAY_IMPORT)
    ]
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


# The longest chain of stages importing stages, in rooms: an idea two stages share lives a floor
# down (check's gate in evaluate, the feed recorder in runtimes, an INT8 file's weight pairs in
# arithmetic), so the chain stays short. It was 6 (stream -> run -> builder -> lint -> quantize ->
# check) before those moved (#41.4); 4 since (stream -> run -> builder -> lint). Only goes down.
MAX_STAGE_CHAIN = 4


def _stage_edges() -> dict[str, set[str]]:
    """Stage room -> the other stage rooms its modules import (module or function level)."""
    edges: dict[str, set[str]] = {room: set() for room in STAGES}
    for module, imports in EDGES.items():
        room = _room(module)[1]
        if room in STAGES:
            edges[room] |= {_room(t)[1] for t, *_ in imports if _room(t)[1] in STAGES} - {room}
    return edges


def _longest_chain(edges: dict[str, set[str]]) -> tuple[str, ...]:
    def from_room(room: str, path: tuple[str, ...]) -> tuple[str, ...]:
        if room in path:  # a cycle (test_no_import_cycles names it): stop here
            return path
        return max((from_room(t, (*path, room)) for t in sorted(edges[room])), key=len, default=(*path, room))

    return max((from_room(room, ()) for room in STAGES), key=len)


def test_the_stage_chain_stays_short():
    chain = _longest_chain(_stage_edges())
    assert len(chain) <= MAX_STAGE_CHAIN, " -> ".join(chain)
    # The measure sees the chain the shared ideas made: lint importing quantize's weight pairs and
    # quantize importing check's gate gave six rooms.
    edges = _stage_edges()
    edges["edgekit.lint"].add("edgekit.quantize")
    edges["edgekit.quantize"].add("edgekit.check")
    assert len(_longest_chain(edges)) == 6


def test_the_rules_see_a_broken_house():
    """The checks above would fail on a decode loop importing a stage and on a cycle."""
    edges = dict(EDGES)
    edges["edgekit.decode.masked"] = [
        *edges["edgekit.decode.masked"],
        ("edgekit.quantize", 1, False, "from edgekit.quantize import x"),
    ]
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


# Raw reads of the manifest (``bundle.manifest["engines"]``, ``.get``/``.setdefault``/``.pop``) outside
# the modules that own it (``bundle.py`` and ``manifest*.py``), copies included: a name bound to the
# manifest or to a section the Bundle hands back as a dict (``manifest = copy.deepcopy(b.manifest)``,
# ``fused = b.fused or {}``, ``for e in fused.values()``) and then read by key counts as well. Typed
# sections (``artifact``, ``quantization``, ``step_buckets``, ``engines``, ``verification``) have no keys
# to read; ``as_recorded`` (a section as written, for documents) does. The kind's ``meta`` and
# ``conditioning`` are the decode loops' contract (``spec``), handed over whole, and not counted.
# The ceiling only goes down.
MANIFEST_OWNERS = (
    "bundle.py",
    "manifest.py",
    "manifest_schema.py",
    "manifest_sections.py",
    "manifest_types.py",
    "manifest_values.py",
    "manifest_engines.py",
    "manifest_views.py",
)
RAW_SECTIONS = ("manifest", "as_recorded", "decode_defaults", "fused", "flow_quality")
MAX_RAW_MANIFEST_READS = 8
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _unwrapped(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):  # ``section or {}``
        node = node.values[0]
    return node


def _is_raw(node: ast.AST, copies: set[str]) -> bool:
    node = _unwrapped(node)
    return (isinstance(node, ast.Attribute) and node.attr in RAW_SECTIONS) or (
        isinstance(node, ast.Name) and node.id in copies
    )


def _copies_raw(node: ast.AST, copies: set[str]) -> bool:
    """Whether ``node`` evaluates to (part of) a raw section: the section, a key of it, its
    values, or a copy (``copy.deepcopy``, ``dict``, ``json.loads(json.dumps(...))``)."""
    node = _unwrapped(node)
    if _is_raw(node, copies):
        return True
    if isinstance(node, ast.Subscript):
        return _copies_raw(node.value, copies)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("get", "values", "items", "copy"):
            return _copies_raw(func.value, copies)
        copier = (isinstance(func, ast.Attribute) and func.attr in ("deepcopy", "loads", "dumps")) or (
            isinstance(func, ast.Name) and func.id in ("dict", "list")
        )
        return copier and bool(node.args) and _copies_raw(node.args[0], copies)
    return False


def _scope_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of one scope, without the bodies of the functions defined in it."""
    out, todo = [], list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        out.append(node)
        if not isinstance(node, _FUNCTIONS):
            todo += ast.iter_child_nodes(node)
    return out


def _raw_manifest_reads(source: str) -> list[int]:
    """The line of every subscript (or .get/.setdefault/.pop) of a raw manifest section or a name
    bound to a copy of one, in its function or in the functions inside it."""
    lines = []
    scopes: list[tuple[ast.AST, set[str]]] = [(ast.parse(source), set())]
    while scopes:
        scope, inherited = scopes.pop()
        nodes, copies = _scope_nodes(scope), set(inherited)
        for _ in range(3):  # a copy of a copy
            for node in nodes:
                bound = (
                    [(t, node.value) for t in node.targets]
                    if isinstance(node, ast.Assign)
                    else ([(node.target, node.iter)] if isinstance(node, (ast.For, ast.comprehension)) else [])
                )
                copies |= {
                    n.id
                    for target, value in bound
                    if _copies_raw(value, copies)
                    for n in ast.walk(target)
                    if isinstance(n, ast.Name)
                }
        for node in nodes:
            if isinstance(node, ast.Subscript):
                target = node.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "setdefault", "pop")
            ):
                target = node.func.value
            else:
                continue
            if _is_raw(target, copies):
                lines.append(node.lineno)
        scopes += [(node, copies) for node in nodes if isinstance(node, _FUNCTIONS)]
    return sorted(lines)


def test_stages_read_the_manifest_through_the_bundle():
    reads = [
        f"{path.relative_to(PACKAGE).as_posix()}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).as_posix() not in MANIFEST_OWNERS
        for line in _raw_manifest_reads(path.read_text())
    ]
    assert len(reads) <= MAX_RAW_MANIFEST_READS, (
        f"{len(reads)} raw manifest reads (ceiling {MAX_RAW_MANIFEST_READS}); read through Bundle's accessors instead: "
        + ", ".join(reads)
    )


def test_the_manifest_count_sees_a_raw_read_and_its_copies():
    source = (
        'a = b.manifest["engines"]\n'
        'c = b.manifest.get("fused") or {}\n'
        'b.manifest.setdefault("x", {})[k] = 1\n'
        "d = b.decode_defaults\n"
        "def f(b):\n"
        "    m = copy.deepcopy(b.manifest)\n"
        '    m["artifacts"]["fp32"]["path"]\n'
        "    g = b.fused or {}\n"
        "    for e in g.values():\n"
        '        e.get("path")\n'
        '    x = (b.flow_quality or {}).get("table")\n'
        "    q = b.quantization\n"
        '    q.profile, b.engines[k], b.engine_for("trt", "int8")\n'
        '    lambda: m.pop("fused")\n'
        "def h(m):\n"
        '    return m["x"]\n'  # a parameter: not known to be the manifest
    )
    assert _raw_manifest_reads(source) == [1, 2, 3, 7, 10, 11, 14]


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
