"""With only the core installed (no torch, onnxscript, safetensors, tensorrt, matplotlib),
every module imports and every command's --help works."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import importlib, pkgutil, sys
BLOCKED = ("torch", "onnxscript", "safetensors", "tensorrt", "pynvml", "matplotlib", "cuda")
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked for the test: {name}")
sys.meta_path.insert(0, Block())
import edgekit
# Model definitions subclass torch.nn.Module: they are torch by nature and only the export
# side imports them. Everything else must import without any optional package.
TORCH_MODELS = {"edgekit.models._blocks", "edgekit.models.masked", "edgekit.models.flow", "edgekit.models.ar"}
for mod in pkgutil.walk_packages(edgekit.__path__, "edgekit."):
    if mod.name in TORCH_MODELS:
        try:
            importlib.import_module(mod.name)
        except ImportError as exc:
            assert "torch" in str(exc), exc
        else:
            raise AssertionError(mod.name + " imported with torch blocked?")
        continue
    importlib.import_module(mod.name)
from typer.testing import CliRunner
from edgekit.cli import app
import typer.main
runner = CliRunner()
commands = typer.main.get_command(app).commands
assert len(commands) >= 5, commands
for args in [["--help"]] + [[c, "--help"] for c in commands]:
    r = runner.invoke(app, args)
    assert r.exit_code == 0, (args, r.output)
assert not [m for m in sys.modules if m.split(".")[0] in BLOCKED]
print("ok", len(commands))
"""


def test_every_module_imports_and_every_help_works_without_optional_deps():
    r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("ok")


def test_missing_torch_gives_install_line(tmp_path):
    script = SCRIPT.split("import edgekit")[0] + (
        "from typer.testing import CliRunner\nfrom edgekit.cli import app\n"
        f"r = CliRunner().invoke(app, ['export', 'masked-demo', '-o', {str(tmp_path / 'b')!r}])\n"
        "print(r.exit_code); print(r.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    code, message = r.stdout.split("\n", 1)
    assert code == "3", r.stdout + r.stderr
    assert (
        "pip install 'edgekit[export]'" in message and "-c constraints.txt" in message
    )  # the CPU build of torch (issue #31)
