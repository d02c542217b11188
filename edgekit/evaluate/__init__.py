"""The evaluation the stages share: conditioning inputs for a bundle, ground-truth scores where a
model has them, a user's quality metric hook (``--metric module:function``), and decoding an
evaluation set in batches of the graph's static batch under per-batch seeds.

Where conditions come from, first match per input: ``--cond NAME=VALUE`` (every row); rows of real
data (``--cond-data FILE.npz|DIR``, or the held-out rows ``edgekit quantize`` stored in the
bundle); the demo model's held-out set; else (quantize, check, profile only: ``draw=True``) the
model's ``condition_sampler`` hook, else seeded uniform draws within the declared ``[low, high)``.

quantize (calibration and budget), check, profile and run all decode through here, so "the same
seed" means the same conditions and the same noise everywhere.

``conditions``: the conditioning arrays per decode; ``cond_files``: reading and checking ``--cond``
values; ``data``: real condition rows; ``scores``: ground truth and metric hooks; ``decoding``:
an evaluation set decoded in batches; ``gate``: two runtimes decoded side by side and judged as
`edgekit check` judges them by default (``metrics``: what two decodes differ by; ``thresholds``
and ``verdict``: what passes), for quantize's budget, debug and check."""

from edgekit.evaluate.cond_files import (
    MAX_COND_ROWS,
    check_cond_values,
    cond_file_rows,
    read_npy,
)
from edgekit.evaluate.conditions import (
    check_rows,
    condition_rows,
    conditions,
    pad_rows,
)
from edgekit.evaluate.data import ConditionData, load_condition_data, stored_rows
from edgekit.evaluate.decoding import evaluate
from edgekit.evaluate.gate import decode_pair, gate_runtimes
from edgekit.evaluate.scores import (
    HIGHER_IS_BETTER,
    MetricHook,
    load_metric_hook,
    output_name,
    power_ratio_db,
    run_metric_hook,
    score,
    snr_db,
)

__all__ = [
    "HIGHER_IS_BETTER",
    "MAX_COND_ROWS",
    "ConditionData",
    "MetricHook",
    "check_cond_values",
    "check_rows",
    "cond_file_rows",
    "condition_rows",
    "conditions",
    "decode_pair",
    "evaluate",
    "gate_runtimes",
    "load_condition_data",
    "load_metric_hook",
    "output_name",
    "pad_rows",
    "power_ratio_db",
    "read_npy",
    "run_metric_hook",
    "score",
    "snr_db",
    "stored_rows",
]
