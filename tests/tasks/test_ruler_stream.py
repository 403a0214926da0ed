"""RULER's own seed-42 needle draws (``kvx.tasks.ruler_stream``) against the KVDiagnosis release.

The fast test pins draws the release's references show (``niah_single_2_000190``'s 8315831, the
release's first niah_single_2 id at both 8K and 16K, is RULER's 110th call); the release test, where
``KVX_KVDIAGNOSIS_RELEASE`` points at a checkout of ChosenQC/KVDiagnosis, counts how many of each
essay-haystack NIAH subtask's 100 references the stream reproduces.
"""

from __future__ import annotations

import os

import pytest

from kvx.tasks.kvdiagnosis_ids import release_sources
from kvx.tasks.ruler_stream import ESSAY_TASKS, stream, word_pairs

RELEASE = os.environ.get("KVX_KVDIAGNOSIS_RELEASE", "")
#: release references the stream reproduces, of 100 per subtask (RULER-8K, RULER-16K)
REPRODUCED = dict.fromkeys(ESSAY_TASKS, (100, 100))


def test_the_stream_is_rulers_seed_42_draws():
    assert word_pairs() == 910 * 6782  # wonderwords' distinct adjectives x nouns
    assert stream(ESSAY_TASKS["niah_single_2"], 110)[109] == ("8315831",)
    assert stream(ESSAY_TASKS["niah_single_3"], 96)[95] == ("a7f36ae9-25c7-4c44-be75-c3b4664fa663",)
    multivalue = stream(ESSAY_TASKS["niah_multivalue"], 19)[18]
    assert multivalue == ("6672134", "1352896", "4860684", "4694634")  # niah_multivalue_014210
    assert ("8315831",) not in stream(ESSAY_TASKS["niah_single_2"], 110, seed=43)


@pytest.mark.skipif(not RELEASE, reason="KVX_KVDIAGNOSIS_RELEASE names no checkout of ChosenQC/KVDiagnosis")
@pytest.mark.parametrize(("workload", "column"), [("ruler8k", 0), ("ruler16k", 1)])
def test_the_stream_reproduces_the_release_references(workload, column):
    release = release_sources(RELEASE, workload)
    for name, config in ESSAY_TASKS.items():
        drawn = set(stream(config, 400))
        references = [s.references for s in release if s.task == name]
        assert len(references) == 100
        assert sum(r in drawn for r in references) == REPRODUCED[name][column], name
