"""Text coded exactly: two values share a code only when Python finds them equal (and of one type).

pandas hashes an object array of ``str`` with a C-string table that stops at the first NUL and merges
strings holding lone surrogates, so ``pd.Categorical``, ``pd.factorize``, ``unique``, ``nunique`` and
``groupby`` on such text merge distinct values (pandas-dev/pandas#34551, fixed only in pandas 3.1).
Records hold model answers and source ids, which may hold either, so the aggregate codes text here,
with a dict.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def factorize(values: Iterable[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes (-1 for None and NaN) and the distinct values in first-seen order.

    Strings are keyed by themselves, anything else by its type too, so ``True``, ``1`` and ``1.0`` stay
    three values as they were three in the record."""
    seen: dict[Any, int] = {}
    uniques: list[Any] = []
    codes = []
    for value in values:
        if _missing(value):
            codes.append(-1)
            continue
        key = value if type(value) is str else (type(value), value)
        code = seen.get(key)
        if code is None:
            code = seen[key] = len(uniques)
            uniques.append(value)
        codes.append(code)
    return np.array(codes, dtype=np.int64), np.fromiter(uniques, dtype=object, count=len(uniques))


def group_codes(frame: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """One code per distinct combination of ``columns`` (missing values a value of their own), first
    seen first: what ``groupby(columns, sort=False, dropna=False).ngroup()`` gives, for any text."""
    if frame.empty:
        return np.zeros(0, dtype=np.int64)
    parts = [factorize(frame[c].to_numpy(object))[0].tolist() for c in columns]
    return factorize(zip(*parts, strict=True))[0]


def exact(column: pd.Series) -> pd.Series:
    """``column`` as integer codes on its own index (missing stays missing): group, count distinct or
    compare on these instead of the text, and pandas never hashes the text."""
    codes, _ = factorize(column.to_numpy(object))
    return pd.Series(codes, index=column.index, name=column.name).where(codes >= 0)


def drop_duplicates(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``frame.drop_duplicates(columns)`` (the first row of each combination kept, in order), comparing
    text exactly: pandas factorizes each column of several with its string hash table."""
    if frame.empty:
        return frame
    return frame.iloc[np.unique(group_codes(frame, columns), return_index=True)[1]]


def n_distinct(column: pd.Series) -> int:
    """``column.nunique()``, comparing text exactly."""
    return len(factorize(column.to_numpy(object))[1])
