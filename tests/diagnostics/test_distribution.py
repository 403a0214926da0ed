"""Paired teacher-forced distribution metrics (KVDiagnosis section 4), hand-computed."""

from __future__ import annotations

import math

import pytest
import torch

from kvx.diagnostics.distribution import DEFAULT_EPS, distribution_metrics, gold_ranks


def test_identical_logits_have_no_drift() -> None:
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(7, 300, generator=g)
    gold = torch.randint(0, 300, (7,), generator=g)
    out = distribution_metrics(logits, logits.clone(), gold)
    assert abs(out["delta_nll"]) < 1e-12
    assert abs(out["kl"]) < 1e-12
    assert out["top50"] == 1.0
    assert out["gpr"] == pytest.approx(1.0, abs=2 * DEFAULT_EPS / math.exp(-out["nll_full"]))
    assert out["gpr"] < 1.0  # eps sits in the denominator
    assert out["rank_shift_first"] == 0
    assert out["rank_shift_mean"] == 0.0
    assert out["n_tokens"] == 7


def test_hand_computed_two_tokens_three_words() -> None:
    # Logits are log-probabilities, so softmax returns them unchanged; compressed logits are
    # shifted by +7 (softmax is shift-invariant, so nothing below may change).
    # t0: p^F = (.5, .3, .2), p^C = (.2, .5, .3), gold 0
    # t1: p^F = (.2, .5, .3), p^C = (.1, .4, .5), gold 1
    pf = torch.tensor([[0.5, 0.3, 0.2], [0.2, 0.5, 0.3]])
    pc = torch.tensor([[0.2, 0.5, 0.3], [0.1, 0.4, 0.5]])
    gold = torch.tensor([0, 1])
    out = distribution_metrics(pf.log(), pc.log() + 7.0, gold, k=2)
    # NLL^F = -(ln .5 + ln .5)/2 = ln 2 = 0.693147
    # NLL^C = -(ln .2 + ln .4)/2 = -ln(.08)/2 = 1.262864;  ΔNLL = 0.569717
    assert out["nll_full"] == pytest.approx(math.log(2), abs=1e-6)
    assert out["nll_comp"] == pytest.approx(-math.log(0.08) / 2, abs=1e-6)
    assert out["delta_nll"] == pytest.approx(0.569717, abs=1e-6)
    # GPR = e^{-1.262864} / (e^{-0.693147} + 1e-6) = 0.2828427 / 0.500001 = 0.5656843
    assert out["gpr"] == pytest.approx(math.sqrt(0.08) / (0.5 + 1e-6), abs=1e-6)
    assert out["gpr"] == pytest.approx(0.565684, abs=1e-6)
    # KL_0 = .5 ln(.5/.2) + .3 ln(.3/.5) + .2 ln(.2/.3) = .458145 - .153248 - .081093 = .223804
    # KL_1 = .2 ln(.2/.1) + .5 ln(.5/.4) + .3 ln(.3/.5) = .138629 + .111572 - .153248 = .096953
    # mean = .160379
    kl0 = 0.5 * math.log(0.5 / 0.2) + 0.3 * math.log(0.3 / 0.5) + 0.2 * math.log(0.2 / 0.3)
    kl1 = 0.2 * math.log(0.2 / 0.1) + 0.5 * math.log(0.5 / 0.4) + 0.3 * math.log(0.3 / 0.5)
    assert out["kl"] == pytest.approx((kl0 + kl1) / 2, abs=1e-6)
    assert out["kl"] == pytest.approx(0.160379, abs=1e-6)
    # Top-2: t0 F {0,1} vs C {1,2} -> 1/2;  t1 F {1,2} vs C {2,1} -> 2/2;  mean 0.75
    assert out["top50"] == pytest.approx(0.75, abs=1e-12)
    # Gold ranks: F (1, 1); C t0 gold .2 is below .5 and .3 -> 3, t1 gold .4 below .5 -> 2
    assert out["gold_rank_full_first"] == 1
    assert out["gold_rank_comp_first"] == 3
    assert out["gold_rank_full_mean"] == 1.0
    assert out["gold_rank_comp_mean"] == 2.5
    assert out["rank_shift_first"] == 2
    assert out["rank_shift_mean"] == 1.5
    assert out["n_tokens"] == 2


def test_kl_is_full_to_compressed_direction() -> None:
    pf = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)  # float64 so abs=1e-9 is fair
    pc = torch.tensor([[0.2, 0.5, 0.3]], dtype=torch.float64)
    gold = torch.tensor([0])
    forward = 0.5 * math.log(0.5 / 0.2) + 0.3 * math.log(0.3 / 0.5) + 0.2 * math.log(0.2 / 0.3)
    reverse = 0.2 * math.log(0.2 / 0.5) + 0.5 * math.log(0.5 / 0.3) + 0.3 * math.log(0.3 / 0.2)
    assert abs(forward - reverse) > 1e-3
    assert distribution_metrics(pf.log(), pc.log(), gold, k=1)["kl"] == pytest.approx(forward, abs=1e-9)


def test_gold_rank_ties_and_strictness() -> None:
    logits = torch.tensor([[1.0, 1.0, 2.0], [0.0, 0.0, 0.0]])
    # row 0: gold 0 ties with 1, only index 2 is strictly larger -> rank 2; row 1: all tied -> 1
    assert gold_ranks(logits, torch.tensor([0, 2])).tolist() == [2, 1]


def test_eps_is_used() -> None:
    pf = torch.tensor([[0.5, 0.5]]).log()
    out = distribution_metrics(pf, pf, torch.tensor([0]), eps=0.5, k=1)
    assert out["gpr"] == pytest.approx(0.5 / (0.5 + 0.5), abs=1e-12)


def test_k_larger_than_vocab_raises() -> None:
    # Decision: raise, not clamp. Clamped k = V would report Top-k overlap 1.0 for any pair.
    x = torch.zeros(2, 3)
    gold = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="1 <= k"):
        distribution_metrics(x, x, gold, k=4)
    with pytest.raises(ValueError):
        distribution_metrics(x, x, gold, k=0)
    assert distribution_metrics(x, x, gold, k=3)["top50"] == 1.0


@pytest.mark.parametrize(
    "full, comp, gold",
    [
        (torch.zeros(2, 3), torch.zeros(2, 4), torch.tensor([0, 1])),  # shape mismatch
        (torch.zeros(0, 3), torch.zeros(0, 3), torch.zeros(0, dtype=torch.long)),  # T = 0
        (torch.zeros(2, 3), torch.zeros(2, 3), torch.tensor([0, 3])),  # gold out of vocab
        (torch.zeros(2, 3), torch.zeros(2, 3), torch.tensor([0.0, 1.0])),  # gold not long
        (torch.full((2, 3), float("nan")), torch.zeros(2, 3), torch.tensor([0, 1])),
    ],
)
def test_input_errors(full, comp, gold) -> None:
    with pytest.raises(ValueError):
        distribution_metrics(full, comp, gold, k=1)
