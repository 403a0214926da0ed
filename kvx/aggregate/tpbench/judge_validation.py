"""``python -m kvx.aggregate.tpbench.judge_validation``: a judge's agreement with Answer Equivalence's
human ratings, the validation of the P1 judge in TPBench §6.1.1 ("Agreement with external human
judgments").

    python -m kvx.aggregate.tpbench.judge_validation answer-equivalence-dataset/v1/ae_test.jsonl \\
        --ids TPBench/data/semantic_evaluation/ae_test_inputs.jsonl judge=tpbench_p1

The judge (``judge=<name>`` and ``judge.<field>=<value>`` as for ``python -m kvx``; default
``tpbench_p1`` with the paper's model) reads each pair of an official AE file
(:mod:`kvx.tasks.answer_equivalence`: the question, the passage, the reference, the candidate; never a
rating) and its decision is set against the ratings' majority, beside the paper's fixed baselines,
normalized exact match and token F1 >= 0.5. Reported per method: the confusion counts, accuracy and
balanced accuracy with question-clustered bootstrap 95% intervals, and the judge's paired accuracy
gain over each baseline (:mod:`kvx.aggregate.stats.agreement`, the release's
``aggregate_ae_judge.py``: 10,000 resamples from seed 20260928). Human ties are left out; a judgment
the judge left uncertain, could not make (error) or did not apply to earns no credit and stays in the
denominator, each counted. ``--ids`` selects the release's 200 dev / 600 test pairs by their ids;
``--sample`` draws kvx's own label-blind sample instead; ``--out`` writes every pair's judgment and
the metrics as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
from pathlib import Path
from typing import Any

from kvx.aggregate.stats.agreement import AE_BOOT_SEED, AE_N_BOOT, agreement_intervals, confusion
from kvx.core import commands
from kvx.core.errors import ConfigError
from kvx.core.registry import registry
from kvx.judges.base import UNCERTAIN, Judge, Judgment
from kvx.pipeline.judge import judge_model, judge_texts
from kvx.tasks import answer_equivalence as ae

PROG = "kvx.aggregate.tpbench.judge_validation"
#: the fixed baselines of the paper, by the name the report gives them
BASELINES = ("exact_match", "token_f1_ge_half")


def build_judge(overrides: list[str]) -> tuple[str, Judge]:
    """The judge named by ``judge=<name>`` (default ``tpbench_p1``) with its ``judge.<field>=<value>``
    overrides (YAML values; ``+judge.`` as ``judge.``), validated before any model loads."""
    from omegaconf import OmegaConf

    name, fields = "tpbench_p1", []
    for item in overrides:
        key, sep, value = item.removeprefix("+").partition("=")
        if not sep or not (key == "judge" or key.startswith("judge.")):
            raise ConfigError(f"{item!r}: expected judge=<name> or judge.<field>=<value>")
        if key == "judge":
            name = value
        else:
            fields.append(f"{key.removeprefix('judge.')}={value}")
    cls = registry("judge").get(name)
    given: dict[str, Any] = OmegaConf.to_container(OmegaConf.from_dotlist(fields))  # type: ignore[assignment]
    known = [f.name for f in dataclasses.fields(cls)]
    for key in given:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean judge.{close[0]}?" if close else ""
            raise ConfigError(
                f"judge.{key}: judge {name} has no such field (fields: {', '.join(known)}){hint}"
            )
    judge = cls(**given)
    judge.validate()
    return name, judge


def decision(judgment: Judgment) -> bool | None:
    """A judgment as a yes/no: None when uncertain, an error or not applicable (no credit)."""
    if judgment.status != "judged" or judgment.verdict == UNCERTAIN:
        return None
    return bool(judgment.correct)


def report(
    pairs: list[ae.Pair],
    name: str,
    judgments: list[Judgment],
    n_boot: int = AE_N_BOOT,
    seed: int = AE_BOOT_SEED,
) -> dict[str, Any]:
    """The validation report: counts, each method's confusion and point rates, and the intervals."""
    labels = [p.majority for p in pairs]
    decisions = {
        name: [decision(j) for j in judgments],
        "exact_match": [p.exact_match for p in pairs],
        "token_f1_ge_half": [p.token_f1 >= ae.F1_THRESHOLD for p in pairs],
    }
    intervals = agreement_intervals(labels, decisions, [p.qid for p in pairs], n_boot, seed)
    resolved = [p for p in pairs if p.majority is not None]
    return {
        "pairs": len(pairs),
        "resolved": len(resolved),
        "human_ties": len(pairs) - len(resolved),
        "clusters": len({p.qid for p in resolved}),
        "bootstrap": {"unit": "question id", "resamples": n_boot, "seed": seed},
        "judgments": {
            status: sum(j.status == status for j in judgments)
            for status in ("judged", "error", "not_applicable")
        }
        | {"uncertain": sum(j.verdict == UNCERTAIN for j in judgments)},
        "methods": {
            method: confusion(labels, values).as_dict() | {"ci95": intervals[method]}
            for method, values in decisions.items()
        },
    }


def _interval(point: float | None, ci: tuple[float | None, float | None] | None, scale: float = 1.0) -> str:
    if point is None:
        return "undefined"
    if ci is None or ci[0] is None or ci[1] is None:
        return f"{scale * point:.3f}"
    return f"{scale * point:.3f} [{scale * ci[0]:.3f}, {scale * ci[1]:.3f}]"


def table(result: dict[str, Any], judge: str) -> str:
    """The report as a markdown table, one row per method."""
    methods = result["methods"]
    lines = [
        "| method | resolved | tp | tn | fp | fn | uncertain | accuracy [95% CI] "
        f"| balanced accuracy [95% CI] | {judge}'s gain, pp [95% CI] |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method, m in methods.items():
        gain = None
        if method != judge and methods[judge]["accuracy"] is not None and m["accuracy"] is not None:
            gain = methods[judge]["accuracy"] - m["accuracy"]
        ci, uncertain = m["ci95"], m["uncertain_positive"] + m["uncertain_negative"]
        lines.append(
            f"| {method} | {m['resolved']} | {m['tp']} | {m['tn']} | {m['fp']} | {m['fn']} | {uncertain} | "
            f"{_interval(m['accuracy'], ci['accuracy'])} | "
            f"{_interval(m['balanced_accuracy'], ci['balanced_accuracy'])} | "
            f"{'' if gain is None else _interval(gain, ci.get('gain'), 100)} |"
        )
    return "\n".join(lines)


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.splitlines()[0])
    parser.add_argument("file", help="an official AE file (v1/ae_dev.jsonl, v1/ae_test.jsonl)")
    parser.add_argument("overrides", nargs="*", help="judge=<name> and judge.<field>=<value>")
    parser.add_argument(
        "--ids", default=None, help="only these pairs, in this order (the release's inputs file)"
    )
    parser.add_argument(
        "--sample", type=int, default=None, help="kvx's label-blind sample of this many pairs"
    )
    parser.add_argument("--seed", type=int, default=0, help="the seed of --sample")
    parser.add_argument("--boot", type=int, default=AE_N_BOOT, help="bootstrap resamples")
    parser.add_argument("--boot-seed", type=int, default=AE_BOOT_SEED, help="the bootstrap's seed")
    parser.add_argument("--outputs-dir", default="outputs", help="where a served judge caches its replies")
    parser.add_argument("--out", default=None, help="write every pair's judgment and the report here (JSON)")
    args = parser.parse_intermixed_args(argv)
    if args.out and not Path(args.out).resolve().parent.is_dir():
        raise ConfigError(f"--out={args.out!r}: its folder does not exist")
    ids = ae.read_ids(args.ids) if args.ids else None
    pairs = ae.select(ae.load_pairs(args.file), ids, args.sample, args.seed)
    name, judge = build_judge(args.overrides)
    chat, model = judge_model(judge, Path(args.outputs_dir))
    items = [(ae.to_source(p), p.candidate) for p in pairs]
    judgments = judge_texts(items, name, judge, chat, model=model)
    result = report(pairs, name, judgments, args.boot, args.boot_seed)
    print(
        f"{args.file}: {result['pairs']} pairs, {result['resolved']} resolved ({result['human_ties']} human "
        f"ties) in {result['clusters']} questions; judge {judge.label(name)}: {result['judgments']}\n"
    )
    print(table(result, name))
    if args.out:
        rows = [
            {"id": p.id, "qid": p.qid, "majority": p.majority, "judgment": j.to_dict()}
            for p, j in zip(pairs, judgments, strict=True)
        ]
        Path(args.out).write_text(
            json.dumps({"report": result, "pairs": rows}, indent=1) + "\n", encoding="utf-8"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    """The validation's exit code: 0, or 2 with one line for bad input (:func:`kvx.core.commands.run`)."""
    return commands.run(PROG, _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
