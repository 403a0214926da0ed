"""The KVDiagnosis release's Qasper and HotpotQA sources by name, as rows of the official data.

The release (ChosenQC/KVDiagnosis) names each source in its ledger (:data:`LEDGER`) by a counter,
``qasper_000017`` or ``hotpotqa_000076``, with its reference answer and a prompt hash, never by the
dataset's own id, and publishes neither its sampler nor its prompts. What kvx can still tell:

* **HotpotQA**: the 200 are a shuffled sample of the dev (distractor) set (no Python, NumPy or
  Hugging Face seed below 100,000 draws them). :data:`HOTPOTQA` gives each its dev ``_id``: 151 by
  their reference answer, which no other dev question has; 49 whose answer others share (``yes``,
  ``1993``) by the question and document titles the release's 25 recorded answers for that source
  repeat (``scripts/kvdiagnosis_hotpotqa_ids.py`` derives it and prints each choice's margin).
* **Qasper**: the 200 are annotator answers grouped by paper and question: consecutive samples
  with one prompt hash are one question's answers (``qasper_000001`` and ``qasper_000002``).
  :func:`qasper_positions` finds, for each such run, the question of the official file that has
  its references, so the file must be the one the release drew from (allenai's Qasper v0.3; which
  split is not said, and no Qasper file is readable offline to check it here).

``task.ids`` for ``task=qasper`` or ``task=hotpotqa`` takes a release folder (every sample of that
workload, in the ledger's order) or release sample ids in a list or file, beside the datasets' own ids.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvx.core.errors import ConfigError
from kvx.tasks.rag import ids_label, ids_manifest, read_ids

#: the release's FullCache ledger: one row per source, every workload, in the release's order
LEDGER = "data/processed/full_population/fullcache.jsonl.gz"
#: a release sample id of a QA workload: ``qasper_000017``, ``hotpotqa_000076``
SAMPLE_ID = re.compile(r"^(qasper|hotpotqa)_(\d{6})$")


@dataclass(frozen=True)
class ReleaseSource:
    """One source as the release's ledger names it."""

    sample_id: str
    reference: str
    prompt_hash: str
    #: every reference (RULER's multi-answer needles and word lists); ``reference`` is the first
    references: tuple[str, ...] = ()
    #: the release's ``official_task_name``: ``qasper``, ``hotpotqa``, RULER's subtask (``niah_single_1``)
    task: str = ""
    #: the prompt length in the reader's tokens (for RULER, its ``length``: prompt + generation budget)
    context_length_tokens: int = 0


def release_sources(folder: str, workload: str) -> list[ReleaseSource]:
    """The ledger's sources of ``workload`` (``qasper``, ``hotpotqa``, ``ruler8k``, ``ruler16k``) in
    its order; ConfigError naming the file when the folder is not a KVDiagnosis release."""
    path = Path(folder) / LEDGER
    if not path.is_file():
        raise ConfigError(
            f"task.ids={folder}: a folder must be a KVDiagnosis release (a clone of ChosenQC/KVDiagnosis) "
            f"holding {LEDGER}"
        )
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        rows = [row for row in map(json.loads, handle) if row["dataset"] == workload]
    if not rows:
        raise ConfigError(f"task.ids={folder}: {LEDGER} has no {workload} source")
    return [
        ReleaseSource(
            r["sample_id"],
            r["reference_answer"][0],
            r["prompt_hash"],
            tuple(r["reference_answer"]),
            r.get("official_task_name", workload),
            r.get("context_length_tokens", 0),
        )
        for r in rows
    ]


def requested(ids: str | Sequence[str], workload: str) -> list[str]:
    """The ids ``task.ids`` names: a release folder's sample ids of ``workload``, else the list or file's."""
    if is_release(ids):
        assert isinstance(ids, str)
        return [s.sample_id for s in release_sources(ids, workload)]
    return read_ids(ids)


def is_release(ids: str | Sequence[str]) -> bool:
    """Whether ``task.ids`` names a folder (a release) rather than a list or a file of ids."""
    return isinstance(ids, str) and Path(ids).is_dir()


def release_manifest(ids: str | Sequence[str], workload: str) -> dict[str, Any]:
    """What fixed the slice: the release folder with its ledger's hash and sample ids, else the
    list or file (``kvx.tasks.rag.ids_manifest``)."""
    if not is_release(ids):
        return ids_manifest(ids)
    assert isinstance(ids, str)
    ledger = hashlib.sha256((Path(ids) / LEDGER).read_bytes()).hexdigest()
    return {"ids_release": ids, "ids_ledger_sha256": ledger, "ids": requested(ids, workload)}


def hotpotqa_ids(ids: str | Sequence[str]) -> list[str]:
    """The HotpotQA ``_id``s ``task.ids`` names, release sample ids translated by :data:`HOTPOTQA`;
    a sample id the release does not have is a ConfigError naming it."""
    out, unknown = [], []
    for ident in requested(ids, "hotpotqa"):
        match = SAMPLE_ID.match(ident)
        if match and match[1] == "hotpotqa":
            number = int(match[2])
            if number >= len(HOTPOTQA):
                unknown.append(ident)
                continue
            ident = HOTPOTQA[number]
        out.append(ident)
    if unknown:
        raise ConfigError(
            f"task.ids={ids_label(ids)}: the KVDiagnosis release has no HotpotQA sample {', '.join(unknown)} "
            f"(hotpotqa_000000 to hotpotqa_{len(HOTPOTQA) - 1:06d})"
        )
    return out


def check_hotpotqa(folder: str, answer_of: Mapping[str, str]) -> None:
    """Every release sample's dev row (``answer_of``: ``_id`` -> answer) has the release's reference;
    ConfigError naming those that do not (another dev file, or a wrong entry of :data:`HOTPOTQA`)."""
    differ = [
        s.sample_id
        for s, ident in zip(release_sources(folder, "hotpotqa"), HOTPOTQA, strict=False)
        if ident in answer_of and answer_of[ident] != s.reference
    ]
    if differ:
        raise ConfigError(
            f"task.ids={folder}: the release's reference differs from the row's answer for {differ}"
        )


def qasper_positions(
    sources: Sequence[ReleaseSource], answers: Sequence[tuple[Hashable, str]], label: str
) -> list[int]:
    """Positions in ``answers`` (question key, reference; file order) of the release's ``sources``.

    Consecutive samples sharing a prompt hash are one question's answers: each run is matched to a
    question that has every one of its references (whitespace aside), each reference taking that
    question's next unused answer. Where several questions qualify (a lone ``yes``), the first after
    the previous run's question in file order is taken, else the first. Samples no question answers
    are named in one ConfigError (the file is not the one the release read)."""
    questions: dict[Hashable, list[tuple[int, str]]] = {}
    for position, (question, reference) in enumerate(answers):
        questions.setdefault(question, []).append((position, " ".join(reference.split())))
    runs: list[list[ReleaseSource]] = []
    for source in sources:
        if runs and runs[-1][-1].prompt_hash == source.prompt_hash:
            runs[-1].append(source)
        else:
            runs.append([source])
    out: list[int] = []
    missing: list[str] = []
    after = -1
    for run in runs:
        options = [m for entries in questions.values() if (m := _answers_of(run, entries))]
        if not options:
            missing += [s.sample_id for s in run]
            continue
        chosen = next((m for m in options if m[0] > after), options[0])
        out += chosen
        after = chosen[-1]
    if missing:
        named = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        raise ConfigError(
            f"task.ids={label}: {len(missing)} release samples have no answer with their reference in "
            f"task.path's file: {named} (the release drew from allenai's Qasper v0.3; give the file it read)"
        )
    return out


def _answers_of(run: Sequence[ReleaseSource], entries: Sequence[tuple[int, str]]) -> list[int]:
    """The positions of one question's answers that carry the run's references, in the run's order
    (each reference the next unused answer with it), or [] when one is missing."""
    used: list[int] = []
    for source in run:
        wanted = " ".join(source.reference.split())
        found = next((p for p, r in entries if r == wanted and p not in used), None)
        if found is None:
            return []
        used.append(found)
    return used


#: the release's HotpotQA sample ``hotpotqa_<i>`` is dev ``_id`` ``HOTPOTQA[i]``
#: (``scripts/kvdiagnosis_hotpotqa_ids.py``; the module docstring says how)
HOTPOTQA: tuple[str, ...] = (
    "5abce43855429959677d6b18",
    "5a8986fd55429938390d4046",
    "5a8a423255429930ff3c0d30",
    "5a7f010955429934daa2fc8b",
    "5ab278745542997061209617",
    "5a77b5c255429967ab10523c",
    "5ab611cc5542992aa134a411",
    "5a8adc935542992d82986fb0",
    "5adf04915542995534e8c72f",
    "5ade4e415542992fa25da73f",
    "5ab44a775542991779162c57",
    "5ae7821b5542997ec2727678",
    "5a9068a95542990a98493621",
    "5a7f244255429934daa2fcec",
    "5a904b0c5542995651fb510e",
    "5adefcf15542995ec70e8f4c",
    "5adce3265542992c1e3a2466",
    "5ae4f2c45542990ba0bbb1a9",
    "5adbc9a4554299438c868caf",
    "5ab58f9a554299488d4d99da",
    "5ae0ba1155429924de1b7156",
    "5a80ecea55429938b6142254",
    "5aba6d0f55429955dce3ee19",
    "5ab9812d554299753720f821",
    "5ae532365542992663a4f150",
    "5ab4c8735542996a3a969fcb",
    "5ae1f48d554299234fd0436b",
    "5a88364c5542994846c1ce2e",
    "5a79c9cc554299148911fa53",
    "5a8e61165542995085b3741a",
    "5a8841ee5542994846c1ce6b",
    "5ae5fa38554299546bf82ff1",
    "5ab8ffc655429934fafe6e30",
    "5a7af74e55429931da12c9b5",
    "5a7313865542994cef4bc442",
    "5ab5ec795542997d4ad1f252",
    "5abc8d75554299700f9d7900",
    "5a7e058f5542995f4f402390",
    "5ae5d82f554299546bf82f9a",
    "5a909a1a55429916514e7506",
    "5a875b755542996e4f308796",
    "5a8a4b9955429930ff3c0d88",
    "5ac2f1d1554299218029dba4",
    "5abb7d8b5542996cc5e4a006",
    "5aba5e2555429955dce3edf1",
    "5abfca465542993fe9a41e65",
    "5ae0156455429942ec259c15",
    "5ab3e07e55429969a97a81e5",
    "5a8a0cb75542992d82986e7d",
    "5a7336d05542992359bc3293",
    "5ab28c73554299340b525512",
    "5a8e4e7855429917b4a5bd92",
    "5ae0380955429925eb1afc2e",
    "5a8a70ea55429970aeb702e4",
    "5adfa6db55429942ec259ad6",
    "5a79dae35542994f819ef0d3",
    "5a7350d55542994cef4bc535",
    "5ab965f25542996be20204c3",
    "5a7a030c5542996a35c17077",
    "5abdb9775542993f32c2a01b",
    "5ab2eff05542991669774140",
    "5aba480c55429939ce03dc77",
    "5ab34a76554299233954ff3f",
    "5a83b1e75542990548d0b220",
    "5a7af23a55429931da12c994",
    "5ae048a255429924de1b708e",
    "5a7d3f895542995f4f402248",
    "5ab8634e5542990e739ec8de",
    "5abd81ff5542993062266cb3",
    "5ac13e195542994ab5c67cc5",
    "5ae0e8c35542997b2ef7d064",
    "5a7f10e2554299306751360b",
    "5aba3e3355429901930fa78c",
    "5abbdf8055429931dba145bb",
    "5ac3b39e554299204fd21e09",
    "5ae3287f5542991a06ce993b",
    "5aba14195542994dbf0198a9",
    "5a80ddc555429938b6142224",
    "5a871a5e5542996432c5721e",
    "5ab2c0de5542992953946870",
    "5abba17a5542992ccd8e7f60",
    "5ae1fd995542997283cd2313",
    "5a81f85d55429926c1cdadca",
    "5a7fd95d5542992e7d278dc5",
    "5ae1b2b9554299422ee99684",
    "5ab7c87d55429928e1fe38de",
    "5a8b3c5b55429971feec4684",
    "5a713fb15542994082a3e6f0",
    "5a7a73e45542996c55b2ddb6",
    "5ac5461d5542993e66e82296",
    "5ac2583b55429951e9e68565",
    "5ae7940c55429952e35ea984",
    "5a7a3d435542996a35c17154",
    "5a8e341c5542995085b373d6",
    "5adce36e5542990d50227d55",
    "5adcfe7f5542992c1e3a24f1",
    "5ab1ea0a554299340b52542a",
    "5ae7f7d85542994a481bbe52",
    "5ade78e255429939a52fe8d0",
    "5ae692e35542996d980e7c0e",
    "5ae1f8235542997f29b3c1cf",
    "5ac0a18a5542992a796ded41",
    "5a74c2bd5542996c70cfadda",
    "5ac2a20055429967731025cb",
    "5a809e9f5542996402f6a5b1",
    "5a900b575542995b44242099",
    "5ab6f17d5542995eadef00ee",
    "5a8a5dd055429970aeb702c7",
    "5a8ee6915542990e94052bad",
    "5abe34095542993f32c2a088",
    "5ac3d1d9554299204fd21e8a",
    "5a8a032f5542993b751ca9e5",
    "5a7bb2595542995eb53be99b",
    "5ab587f85542992aa134a34d",
    "5ade15ae5542990dbb2f7f4c",
    "5ab8ca5d5542991b5579f005",
    "5abaccd1554299660624161b",
    "5a7e4af3554299495941998c",
    "5ac4b24b5542996feb3fe933",
    "5ae224da554299234fd043ee",
    "5a8f6a025542992414482ab8",
    "5a8f12705542997ba9cb31be",
    "5abc0a5d5542993f40c73c64",
    "5adf043b5542993a75d263d4",
    "5a773d8955429966f1a36cc4",
    "5a8f2fed55429918e830d1c7",
    "5ab97a315542996be2020517",
    "5a72bd0b5542992359bc318f",
    "5a7a2be25542996a35c17118",
    "5ae1b943554299492dc91b7f",
    "5ae604ec5542996de7b71af9",
    "5ab97b27554299131ca4233c",
    "5ab78a445542992aa3b8c826",
    "5a8f0de35542995b44241f40",
    "5ae81060554299540e5a572c",
    "5a8ec02e5542995a26add501",
    "5ab8ee805542991b5579f051",
    "5a87136e5542991e771816b2",
    "5a75fa14554299109176e5dc",
    "5abbd58d554299660624172f",
    "5ae237cf5542992decbdcc78",
    "5a73d3ea5542992d56e7e3af",
    "5ac19ff35542991316484b61",
    "5a89e98955429946c8d6ea0c",
    "5a840e395542992ef85e239d",
    "5ab672165542995eadeeffe0",
    "5a77c74155429967ab105291",
    "5ae09ce855429924de1b7113",
    "5abdc0ad55429933744ab81b",
    "5a825a9d55429940e5e1a870",
    "5a8cbda955429941ae14dee5",
    "5a7929c8554299029c4b5f11",
    "5a88e7a55542993b751ca8ca",
    "5addf9e05542997dc79070f9",
    "5ae1dac85542997283cd229a",
    "5ac31066554299741d48a19d",
    "5ac097b05542996f0d89cc18",
    "5ab47e0a5542990594ba9c32",
    "5adbf34955429947ff173862",
    "5abc32cb55429959677d6a40",
    "5a7ba4765542995eb53be976",
    "5a77c1505542997042120b1b",
    "5ae1e6d95542997283cd22c3",
    "5a7c7c225542996dd594b93f",
    "5abe50b45542991f6610613f",
    "5ab2a54b554299295394678e",
    "5a813b6f55429903bc27b951",
    "5ae13f3c5542997b2ef7d168",
    "5ab639e65542995eadeeff7f",
    "5ae48c4e55429913cc204498",
    "5a7fc8d05542992e7d278d86",
    "5ae1bf46554299234fd042e6",
    "5abd64cb55429933744ab7ad",
    "5a7e14505542995ed0d16685",
    "5ae236da5542994d89d5b397",
    "5a74872655429979e2882978",
    "5a7a32225542990783324eb4",
    "5ae1e9635542997f29b3c19e",
    "5ae504a855429908b63264df",
    "5ab6bdd255429953192ad36e",
    "5ac5101455429924173fb592",
    "5a7c5a87554299683c1c62eb",
    "5a86b13f55429960ec39b6c3",
    "5a7750a155429966f1a36cef",
    "5a7f3d9b5542992e7d278cb8",
    "5a8d0940554299585d9e379e",
    "5a7d61645542997cc2c47455",
    "5addfe1c5542995b365fabaf",
    "5ae1d1a55542997f29b3c138",
    "5ac371aa5542995ef918c191",
    "5ab5fddb554299110f2199af",
    "5ae0111e55429906c02daabc",
    "5a8638945542994775f6072d",
    "5ae786c8554299540e5a55d7",
    "5ae55d1e55429960a22e02cb",
    "5a81ea115542995ce29dcc78",
    "5abb342055429966062416e8",
    "5a8b40b055429949d91db50c",
    "5a8682755542996432c571cf",
    "5a7326cd5542991f29ee2d11",
)
