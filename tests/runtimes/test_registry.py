"""The runtime registry: one entry per name of the vocabulary, read by every room that treats
runtimes differently (engines, builder, lint, targets), and the one error for a bad name or a
precision a runtime lacks."""

from __future__ import annotations

import pytest

import edgekit.runtimes  # noqa: F401  (registers the built-in backends)
from edgekit.bundle import Bundle
from edgekit.errors import UsageError
from edgekit.runtimes import open_runtime
from edgekit.runtimes.registry import backend, backends, check_precision, names, precision_help, runs, runtime_help
from edgekit.targets import list_targets
from edgekit.vocabulary import PRECISIONS, RUNTIMES, TARGET_RUNTIMES


def test_every_runtime_of_the_vocabulary_is_registered_once_in_its_order():
    assert names()[: len(RUNTIMES)] == RUNTIMES
    for b in backends():
        assert b.precisions and set(b.precisions) <= set(PRECISIONS), b.name
        assert set(b.artifacts) <= set(b.precisions), b.name
        assert b.help and b.title and b.requires.module and b.requires.install.startswith("pip install"), b.name


def test_a_runtime_a_target_can_list_knows_its_engines():
    for name in TARGET_RUNTIMES:
        assert backend(name).engine is not None, name
    assert backend("torch").engine is None  # the module runs in edgekit's process: nothing to target
    for target in list_targets():
        assert set(target.runtimes) <= set(TARGET_RUNTIMES), target.name


def test_every_registered_runtime_has_a_builder_and_a_lint_entry_or_says_why_not():
    from edgekit.builder.stage import BUILDERS, NoBuilder, build_runtime
    from edgekit.lint.graph import OP_SUPPORT, RUNTIME_LINT, NoLint
    from edgekit.targets import SUPPORTED_OPS_SOURCES

    assert set(BUILDERS) == set(names()) == set(RUNTIME_LINT)
    for name in names():
        builder, lint = BUILDERS[name], RUNTIME_LINT[name]
        if isinstance(builder, NoBuilder):
            assert builder.why and backend(name).engine is None, name
        if isinstance(lint, NoLint):
            assert lint.why, name
        else:
            assert set(lint) <= set(OP_SUPPORT), name
    assert set(OP_SUPPORT) == set(SUPPORTED_OPS_SOURCES)
    for target in list_targets():  # a target's op-support rules are its build runtime's
        assert target.lint.supported_ops in RUNTIME_LINT[build_runtime(target)], target.name


def test_help_lists_every_runtime_and_who_runs_each_precision():
    text = runtime_help()
    for name in names():
        assert f"{name} (" in text
    assert "qnn (" in text and "edgekit[qnn]" in text
    assert runs("bf16") == ["openvino"] and "bf16 (" in precision_help()


def test_one_error_for_an_unknown_runtime_or_a_precision_it_lacks(tiny_bundles):
    bundle = Bundle.load(tiny_bundles["masked"])
    with pytest.raises(UsageError, match=r"--runtime 'tensorflow' is unknown; valid: ort, torch, trt, openvino, qnn"):
        open_runtime(bundle, "tensorflow")
    with pytest.raises(UsageError, match=r"--precision 'int4' is unknown; valid: fp32, fp16, int8, bf16"):
        open_runtime(bundle, "ort", "int4")
    with pytest.raises(
        UsageError, match=r"--runtime ort has no bf16 \(ONNX Runtime runs fp32 or int8 bundles\); valid: fp32, int8"
    ) as err:
        check_precision("ort", "bf16")
    assert "--runtime openvino for bf16" in str(err.value)
    with pytest.raises(UsageError, match="--runtime qnn has no fp32"):
        open_runtime(bundle, "qnn", "fp32")


def test_a_runtime_reports_the_files_it_loaded(tiny_bundles):
    bundle = Bundle.load(tiny_bundles["masked"])
    with open_runtime(bundle, "ort", "fp32") as rt:
        assert rt.model_files == (bundle.path_of("fp32"),) and rt.settings == {} and rt.timing_note is None
        assert rt.session_info is None
