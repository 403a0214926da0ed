"""kvx.core.lean_imports: hqq, sklearn and scipy.optimize stay off the import path up to a model's forward,
and what transformers imported them for still works once used (a fresh process each: imports are global)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.util import find_spec

import pytest

pytestmark = [
    pytest.mark.slow,  # a fresh process each
    pytest.mark.skipif(
        find_spec("hqq") is None or find_spec("sklearn") is None, reason="hqq and scikit-learn not installed"
    ),
]

TINY = (
    "import torch\n"
    "from transformers import LlamaConfig, LlamaForCausalLM, QuantizedCache\n"
    "cfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,\n"
    "                  num_attention_heads=4, num_key_value_heads=2)\n"
    "torch.manual_seed(0)\n"
    "model = LlamaForCausalLM(cfg).eval()\n"
    "ids = torch.arange(1, 41).view(1, -1)\n"
)

#: a forward on an HQQ-quantized cache: which packages were imported before and after, and a
#: digest of the logits
HQQ_FORWARD = TINY + (
    "import hashlib, json, sys\n"
    "WATCHED = ('hqq', 'sklearn', 'scipy.optimize')\n"
    "before = [m for m in WATCHED if m in sys.modules]\n"
    "with torch.inference_mode():\n"
    "    model(input_ids=ids)\n"
    "    cache = QuantizedCache(backend='hqq', config=cfg, nbits=4, q_group_size=16, residual_length=8)\n"
    "    model(input_ids=ids[:, :32], past_key_values=cache)\n"
    "    out = model(input_ids=ids[:, 32:], past_key_values=cache).logits\n"
    "after = [m for m in WATCHED if m in sys.modules]\n"
    "digest = hashlib.sha256(out.numpy().tobytes()).hexdigest()\n"
    "print(json.dumps({'before': before, 'after': after, 'logits': digest}))\n"
)


def _python(code: str) -> str:
    return _python_each(code)[0]


def _python_each(*codes: str) -> list[str]:
    """What each fresh process printed. They run at once: they are independent, and a suite that
    runs one test at a time leaves the other cores idle."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for code in codes
    ]
    outs = []
    for proc in procs:
        out, err = proc.communicate()
        assert proc.returncode == 0, err
        outs.append(out.strip())
    return outs


def test_hqq_and_sklearn_load_only_when_used_and_results_are_unchanged() -> None:
    lean, plain = map(
        json.loads,
        _python_each(
            "import kvx.core.lean_imports as lean\nassert lean.install()\n" + HQQ_FORWARD, HQQ_FORWARD
        ),
    )
    # what transformers imports by itself
    assert plain["before"] == ["hqq", "sklearn", "scipy.optimize"], plain
    assert lean["before"] == [], lean  # neither up to and through a plain forward
    assert lean["after"] == ["hqq"], lean  # hqq once the HQQ cache quantizes
    assert lean["logits"] == plain["logits"]  # the same quantized cache, the same logits


def test_deferred_blocks_run_as_transformers_wrote_them() -> None:
    code = (
        "import sys, copy, pickle\n"
        "import kvx.core.lean_imports as lean\n"
        "lean.install()\n"
        "import transformers.cache_utils as cu\n"
        "import transformers.generation.candidate_generator as cg\n"
        "import transformers.quantizers.quantizer_hqq as qh\n"
        "import transformers.data.metrics as dm\n"
        "import transformers.utils as tu\n"
        "assert isinstance(cu.HQQQuantizer, lean.Deferred) and isinstance(cg.roc_curve, lean.Deferred)\n"
        "assert isinstance(qh.HQQLinear, lean.Deferred) and isinstance(dm.f1_score, lean.Deferred)\n"
        "assert isinstance(dm.pearsonr, lean.Deferred)\n"
        "assert not {'hqq', 'sklearn', 'scipy.stats'} & set(sys.modules)\n"
        # the modules' own availability checks are transformers' functions again, and truthful
        "assert cu.is_hqq_available is tu.is_hqq_available and cu.is_hqq_available()\n"
        "assert cg.is_sklearn_available is tu.is_sklearn_available and cg.is_sklearn_available()\n"
        "assert copy.deepcopy(cu.HQQQuantizer) is cu.HQQQuantizer\n"
        "import numpy as np\n"
        # the detection losses' Hungarian matcher imports scipy.optimize on first use
        "import transformers.loss.loss_rt_detr as rt\n"
        "assert isinstance(rt.linear_sum_assignment, lean.Deferred) and 'scipy.optimize' not in sys.modules\n"
        "rows, cols = rt.linear_sum_assignment(np.array([[4.0, 1.0], [2.0, 3.0]]))\n"
        "assert list(cols) == [1, 0] and 'scipy.optimize' in sys.modules\n"
        "from sklearn.metrics import roc_curve\n"
        "fpr, tpr, _ = cg.roc_curve([0, 1, 1], [0.1, 0.9, 0.8])\n"
        "assert cg.roc_curve is roc_curve and list(tpr) == [0.0, 0.5, 1.0, 1.0]\n"
        "assert pickle.loads(pickle.dumps(cu.HQQQuantizer)) is __import__('hqq.core.quantize',"
        " fromlist=['Quantizer']).Quantizer\n"
        # quantizer_hqq's block also patches HQQLinear: it runs whole on first use of HQQLinear
        "qh.HQQLinear(None, None)\n"
        "from hqq.core.quantize import HQQLinear\n"
        "assert qh.HQQLinear is HQQLinear and isinstance(HQQLinear.__dict__['weight'], property)\n"
        "assert qh.weight is HQQLinear.__dict__['weight']\n"
        # one block imports from two packages: all its names resolve once one is used
        "assert dm.acc_and_f1(np.array([0, 1, 1]), np.array([0, 1, 0]))['acc'] == 2 / 3\n"
        "from scipy.stats import pearsonr\n"
        "assert dm.pearsonr is pearsonr\n"
        "print('ok')\n"
    )
    assert _python(code) == "ok"


def test_install_is_idempotent_and_says_when_too_late() -> None:
    code = (
        "import sys, kvx.core.lean_imports as lean\n"
        "assert lean.install() and lean.install()\n"
        "assert sum(type(f).__name__ == '_Finder' for f in sys.meta_path) == 1\n"
        "import transformers.cache_utils, transformers.generation.candidate_generator\n"
        "import transformers.quantizers.quantizer_hqq, transformers.data.metrics\n"
        "import transformers.loss.loss_utils\n"
        "print(lean.install())\n"
    )
    assert _python(code) == "False"
