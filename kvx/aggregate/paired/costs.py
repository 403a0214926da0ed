"""What each matrix row costs, and the accuracy–cost frontier it implies.

A nominal setting (keep 50%) does not say how much memory a method holds: quantization adds scales,
zeros and residuals, AdaKV and ThinK mask or zero entries that stay in memory. The measured ratio is
Σ compressed bytes / Σ FullCache bytes over the supported records reporting both, so a long source
weighs as much as the memory it takes. Timings are shown as medians and never used to identify or
validate anything: on a shared machine they are noisy, and only ratios within one run compare.
Records without a ``cost`` (older or external ones) leave every cost column NaN, never imputed.
A served reader's answers hold no KV cache here: their cost is the tokens the server billed and the
money the reader's price table gives, summed per row beside the bytes (``*_sum``; NaN where no record
reports them).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from kvx.aggregate.paired.matrix import POOL_KEYS, controls, levels
from kvx.core.records import ANSWER_COSTS, CELL, COMPRESSION_COSTS, SERVED_COSTS, SUPPORTED, TASK_READER

MIB = 2**20
FULLCACHE = "FullCache"
#: median columns -> (the rows column of a compressed cell, of a FullCache row; None: N/A there)
MEDIANS: dict[str, tuple[str, str | None]] = {
    "kv_mib_median": ("comp_kv_bytes", "full_kv_bytes"),
    "full_kv_mib_median": ("full_kv_bytes", "full_kv_bytes"),
    "masked_share_median": ("comp_masked_share", "full_masked_share"),
    "compress_s_median": ("comp_compress_s", None),
    "prefill_s_median": ("comp_prefill_s", None),
    "kv_decode_peak_mib_median": ("comp_kv_bytes_decode_peak", None),
    "kv_decode_end_mib_median": ("comp_kv_bytes_decode_end", None),
    "question_ms_median": ("comp_question_ms", "full_question_ms"),
    "decode_ms_per_token_median": ("comp_decode_ms_per_token", "full_decode_ms_per_token"),
    "decode_rows_median": ("comp_decode_rows", "full_decode_rows"),
    "new_tokens_median": ("comp_new_tokens", "full_new_tokens"),
}
_IN_MIB = ("kv_mib_median", "full_kv_mib_median", "kv_decode_peak_mib_median", "kv_decode_end_mib_median")
COLUMNS = [
    "level",
    *CELL,
    "ratio",
    "retained_share",
    "n_supported",
    "n_bytes",
    "bytes_ratio",
    *MEDIANS,
    "accuracy",
    "cw_rate",
    *(f"{name}_sum" for name in SERVED_COSTS),
]
#: frontier metric -> +1 when higher is better, -1 when lower is
FRONTIER_METRICS = {"accuracy": 1.0, "cw_rate": -1.0}
FRONTIER_COLUMNS = [
    "level",
    "task",
    "reader",
    "metric",
    "compressor",
    "setting",
    "retained_share",
    "bytes_ratio",
    "rate",
    "on_front",
    "left_out",
]
NO_BYTES = "no KV bytes in the records"
NO_SUPPORTED = "no supported records"
NO_RATE = "N/A rate (no FullCache-correct sources)"


def costs(rows: pd.DataFrame, matrix: pd.DataFrame) -> pd.DataFrame:
    """One row per row of ``matrix`` (same level and cell, same order): the nominal retained share, the
    measured bytes ratio over ``n_bytes`` records, cost medians over supported records (FullCache rows:
    over their controls, one per source, bytes ratio 1) and the matrix's own accuracy and C→W rate."""
    names = ANSWER_COSTS + SERVED_COSTS
    sides = [*(f"full_{name}" for name in names), *(f"comp_{name}" for name in names)]
    needed = [*CELL, *POOL_KEYS, "status", "unit", "full_correct", "retained_share", *sides]
    rows = rows[needed + [f"comp_{name}" for name in COMPRESSION_COSTS]]  # levels relabel copies
    parts = []
    for level, frame in levels(rows):
        parts += [_fullcache(frame).assign(level=level), _compressed(frame).assign(level=level)]
    keys = ["level", *CELL]
    shown = matrix[[*keys, "ratio", "n_sources", "n_supported", "accuracy", "cw_rate"]]
    out = shown.merge(pd.concat(parts, ignore_index=True), on=keys, how="left")
    full = out["compressor"] == FULLCACHE
    out["n_supported"] = out["n_supported"].where(~full, out["n_sources"])  # FullCache: its controls
    out["n_bytes"] = out["n_bytes"].fillna(0).astype(int)
    return out.reindex(columns=COLUMNS)


def _medians(frame: pd.DataFrame, keys: list[str], side: int) -> pd.DataFrame:
    """The ``MEDIANS`` of one side (0: a compressed cell's columns, 1: FullCache's), bytes in MiB."""
    data = pd.DataFrame(
        {
            **{k: frame[k] for k in keys},
            **{
                name: np.nan if columns[side] is None else frame[columns[side]]
                for name, columns in MEDIANS.items()
            },
        }
    )
    out = data.groupby(keys, sort=True).median()
    out[list(_IN_MIB)] /= MIB
    return out


def _compressed(frame: pd.DataFrame) -> pd.DataFrame:
    """Compressed cells; the nominal share from every record, the costs from the supported ones."""
    supported = frame[frame["status"] == SUPPORTED]
    both = supported["comp_kv_bytes"].notna() & supported["full_kv_bytes"].notna()
    sums = pd.DataFrame(
        {
            **{k: supported[k] for k in CELL},
            "n_bytes": both.astype(int),
            "comp": supported["comp_kv_bytes"].where(both, 0.0),
            "full": supported["full_kv_bytes"].where(both, 0.0),
        }
    )
    sums = sums.groupby(CELL, sort=True).sum()
    sums["bytes_ratio"] = sums.pop("comp") / sums.pop("full").where(lambda s: s > 0)
    out = frame.groupby(CELL, sort=True)[["retained_share"]].first()
    out = out.join(sums).join(_medians(supported, CELL, 0)).join(_served(supported, CELL, "comp_"))
    return out.reset_index()


def _served(frame: pd.DataFrame, keys: list[str], prefix: str) -> pd.DataFrame:
    """Tokens and money per group, summed over the answers that report them (NaN where none does)."""
    columns = {f"{name}_sum": frame[f"{prefix}{name}"] for name in SERVED_COSTS}
    data = pd.DataFrame({**{k: frame[k] for k in keys}, **columns})
    return data.groupby(keys, sort=True).sum(min_count=1)


def _fullcache(frame: pd.DataFrame) -> pd.DataFrame:
    """FullCache per task and reader: it keeps everything, so its share and bytes ratio are 1 (the ratio
    only where a control reports its bytes)."""
    # a source's control is one answer in every cell; a cell run before costs were recorded lacks its bytes
    ctl = controls(frame.sort_values("full_kv_bytes", na_position="last", kind="stable"))
    keys = TASK_READER
    out = _medians(ctl, keys, 1).join(ctl.groupby(keys, sort=True)["full_kv_bytes"].count().rename("n_bytes"))
    out = out.join(_served(ctl, keys, "full_"))
    out["bytes_ratio"] = np.where(out["n_bytes"] > 0, 1.0, np.nan)
    out["retained_share"] = 1.0
    out = out.reset_index()
    out["compressor"], out["setting"] = FULLCACHE, ""
    return out


def pareto(cost: ArrayLike, value: ArrayLike) -> np.ndarray:
    """Which points are on the Pareto front: no other point has cost ≤ and value ≥ with one of the two
    strict. Equal points do not dominate each other, so both stay on it."""
    cost, value = np.asarray(cost, float), np.asarray(value, float)
    no_more = cost[None, :] <= cost[:, None]
    no_less = value[None, :] >= value[:, None]
    strict = (cost[None, :] < cost[:, None]) | (value[None, :] > value[:, None])
    return ~(no_more & no_less & strict).any(axis=1)


def frontier(costs: pd.DataFrame) -> pd.DataFrame:
    """Every row of the cost table as a point per metric (accuracy, C→W rate) at its bytes ratio,
    ``on_front`` where no point of the same level, task and reader beats it; FullCache sits at 1 with
    C→W 0 (a control turns none of its own answers wrong). A row that cannot be placed stays listed
    with ``left_out`` saying why and ``on_front`` N/A: never dropped, never imputed."""
    parts = []
    group = costs.groupby(["level", *TASK_READER], sort=False).ngroup()
    for order, (metric, sign) in enumerate(FRONTIER_METRICS.items()):
        part = costs[["level", *CELL, "retained_share", "bytes_ratio"]]
        full = part["compressor"] == FULLCACHE
        rate = costs[metric].where(~full, 0.0) if metric == "cw_rate" else costs[metric]
        part = part.assign(metric=metric, rate=rate, left_out=_left_out(costs, rate))
        on_front = pd.Series(pd.NA, index=part.index, dtype="boolean")
        placed = part[part["left_out"] == ""]
        for _, points in placed.groupby(["level", *TASK_READER], sort=False):
            on_front[points.index] = pareto(points["bytes_ratio"], sign * points["rate"])
        parts.append(part.assign(on_front=on_front, _group=group, _order=order))
    out = pd.concat(parts).sort_values(["_group", "_order"], kind="stable")
    return out[FRONTIER_COLUMNS].reset_index(drop=True)


def _left_out(costs: pd.DataFrame, rate: pd.Series) -> pd.Series:
    why = np.select(
        [costs["n_supported"].fillna(0) == 0, costs["bytes_ratio"].isna(), rate.isna()],
        [NO_SUPPORTED, NO_BYTES, NO_RATE],
        default="",
    )
    return pd.Series(why, index=costs.index, dtype=object)
