"""Tables (CSV + Markdown) and the single self-contained HTML report of ``python -m kvx.aggregate``.

CSV keeps full precision for re-analysis; Markdown and HTML share one display formatting so the
two never disagree: rates in percent, counts as integers, p-values in 3 significant digits, and
every undefined value as "N/A" (never 0).
"""

from __future__ import annotations

import base64
import html
import mimetypes
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pandas as pd
from pandas.api.types import is_bool_dtype, is_integer_dtype, is_numeric_dtype

from kvx.aggregate.kvdiagnosis.workloads import TABLES as KVDIAGNOSIS_TABLES
from kvx.aggregate.publish import kvdiagnosis_section as kvd_extra
from kvx.aggregate.publish.audit_sections import SECTIONS as AUDIT_CONTROLS
from kvx.aggregate.ragscale.audit_rows import EXPLANATION as AUDIT_EXPLANATION
from kvx.aggregate.ragscale.outcomes import CHANGED_SHOWN, first_changed
from kvx.aggregate.tpbench.budgets import EXPLANATION as GAP_EXPLANATION
from kvx.aggregate.tpbench.budgets import TABLES as GAP_TABLES
from kvx.aggregate.tpbench.paper_tables import TABLES as TPBENCH_PAPER_TABLES
from kvx.aggregate.tpbench.probes import TABLES as TPBENCH_TABLES

__all__ = [
    "OPTIONAL_SECTIONS",
    "SECTIONS",
    "Section",
    "markdown_table",
    "write_html",
    "write_section_markdown",
    "write_tables",
]

NA = "N/A"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MAX_HTML_ROWS = 2000  # the CSV always holds every row; this keeps report.html openable

# Column kinds by name: the analysis frames store fractions in [0, 1] under these tokens.
_P_VALUE = re.compile(r"(^p$|^p_|_p$|_pvalue$)")
_PERCENT = re.compile(
    r"(^|_)(rate|share|quality|accuracy|retention|rescue|damage|reversal|excess|kept|agreement)(_|$)"
    r"|^(anchor|structural)_(full|comp)$|^judge\..+\.accuracy$"
)
_COUNT = re.compile(
    r"(^n_|_n$|\.n_judged$|_draws$|^(rows|intersection|union|eligible_pairs|evidence_only|sham_only)$|^(repaired|degraded)_)"
)


@dataclass(frozen=True)
class Section:
    """One report section: which figures and tables it shows and how to read their numbers."""

    anchor: str
    heading: str
    explanation: str
    figures: tuple[str, ...]
    tables: tuple[str, ...]
    empty: str


SECTIONS: tuple[Section, ...] = (
    Section(
        "matrix",
        "Matrix",
        "Each cell is one compressor at one setting for one task and reader, paired source by source "
        "with the FullCache control (the FullCache rows, also shown in each figure title). Mean task "
        "score and accuracy are over supported sources (n_supported). C→W rate = C→W / FullCache-correct "
        "supported sources (n_FC); n_cc, n_cw, n_wc and n_ww count the paired transitions. Unsupported "
        "and errored records are left out of every denominator and counted in n_unsupported and n_error; "
        "a cell whose every record is unsupported is N/A (gray, hatched), never 0. Rows with task "
        "'pooled' weight each task by its sources. m.<name> is each answer metric the task reports "
        "(json_valid, schema_valid, pass, edit_sim, ...): its mean over the supported compressed answers "
        "that carry it (FullCache rows: over the controls), m.<name>_n how many; none carrying it is N/A.",
        ("heatmaps",),
        ("matrix",),
        "no matrix cells in the selected runs",
    ),
    Section(
        "costs",
        "Costs & accuracy–cost frontier",
        "Timings are noisy on shared machines: they are recorded, never used to identify or validate "
        "anything, and only ratios within one run are comparable. The costs table has one row per matrix "
        "row. bytes_ratio = Σ compressed / Σ FullCache KV bytes over the supported records reporting both "
        "(n_bytes), the cache held when decoding starts with quantization scales, zeros and residuals "
        "included and masked entries counted as held; retained_share is the setting's nominal share. The "
        "_median columns are medians over supported records (FullCache rows: over their controls, one per "
        "source): KV MiB compressed and FullCache, masked_share (held bytes masked or zeroed rather than "
        "removed), compress_s (building the compressed cache, a shared full prefill excluded), prefill_s "
        "(that full prefill; N/A where a hook compresses inside it), question_ms, decode_ms_per_token "
        "(steps after the first token), decode_rows (rows of the batch that decoded it, whose timings its "
        "rows share) and new_tokens. accuracy and cw_rate are the matrix's. The frontier places each row "
        "at its bytes_ratio (log axis) against accuracy and the C→W rate, FullCache at 1 with C→W 0; "
        "on_front marks points no other point beats with no more bytes (equal points both stay), drawn as "
        "a step line through ringed points. Rows that cannot be placed, such as records without cost "
        "data, are listed with the reason in left_out and never drawn; missing costs are N/A, never "
        "imputed.",
        ("frontier_plot",),
        ("costs", "frontier"),
        "no matrix cells in the selected runs",
    ),
    Section(
        "failures",
        "Failure sets & categories",
        "A failure row is a source the FullCache control answered correctly and the compressor answered "
        "wrongly (C→W), selected separately for each compressor@setting, so no compressor defines another's "
        "failure set. Diagnostic means are over failure rows with a valid value, count shown in the "
        "matching _n column; never imputed. Categories apply the fixed Table-4 rules: exactly one matching "
        "rule names the category, two or more give 'conflicting', none gives 'ambiguous'. share = rows in "
        "the category / C→W rows of the cell; the 'all' rows pool every cell (sources may repeat).",
        ("category_bars",),
        ("failures", "categories"),
        "no C→W failure rows in the selected runs",
    ),
    Section(
        "matched",
        "Matched comparisons (Jaccard)",
        "For two compressors at the same task, reader and setting label, intersection and union count the "
        "sources in both or either failure set (n_a, n_b: each set's size); Jaccard = intersection / union, "
        "N/A when the union is empty. A low Jaccard, not a small intersection alone, means the methods fail "
        "on different sources. Per-metric _mean_a / _mean_b compare the two compressors over the "
        "intersection rows where the metric is valid for both (count in _n). Equal setting labels do not "
        "imply equal memory.",
        ("jaccard_heatmap",),
        ("matched",),
        "no matched comparisons (needs two compressors with failures at the same task, reader and setting)",
    ),
    Section(
        "separation",
        "Separation",
        "Stratified AUROC of each diagnostic for ranking C→W failures (n_cw) above C→C successes (n_cc), "
        "oriented by direction: 'higher' or 'lower' values mean more failure risk. Only strata holding both "
        "outcomes count (n_strata) and only rows with a valid value enter. 0.5 (dashed) is random ranking; "
        "the 95% intervals are descriptive because sources recur across cells.",
        ("forest_plot",),
        ("separation",),
        "no separation estimates (needs C→W and C→C rows with valid diagnostics in the same strata)",
    ),
    Section(
        "intervention",
        "Intervention",
        "Reproduced C→W rows (n_reproduced of n_cw_rows) are rerun with the evidence intervention and with a "
        "count-matched sham. Repair rate = repaired / n_reproduced for each arm; paired_diff = evidence − "
        "sham with its paired interval, and the McNemar p-value uses the discordant rows (evidence_only, "
        "sham_only). Degradation rate = degraded / n_cc_controls, the matched C→C controls the same "
        "intervention turns wrong. intervention_cohort: the same per Table 4 signature of the C→W rows "
        "(low_ear_candidate is the paper's cohort: rows matching only the low-EAR rule), with the C→C "
        "controls matched per cell and signature, as many as the cell's reproduced rows by a seeded "
        "draw (n_cc_matched of n_cc_candidates).",
        (),
        ("intervention", "intervention_cohort"),
        "no intervention records in the selected runs",
    ),
    Section(
        "contrast",
        "Anchors vs structural metrics",
        "For tasks that declare them (tool_call: json_valid and name_substring vs schema_valid; code_exec: "
        "edit_sim vs pass), each string anchor is shown next to the structural or executable metric it "
        "stands in for: its FullCache mean (_full), compressed mean (_comp) and the share kept (_kept = comp "
        "/ full, N/A when the FullCache mean is 0), over the n supported records where both are defined. An "
        "anchor that keeps ~100% while its structural metric falls is damage a string-only score reports as "
        "lossless. contrast_by_ratio (kv-exec-bench Figure 1): per task, reader, ratio and answer metric, "
        "kept = the mean over compressors of each one's comp / full share (full_mean, comp_mean: the means "
        "of those compressors' means); a compressor whose share is undefined (no supported answer, no "
        "answer pair with the metric, a FullCache mean of 0) is named in undefined and counted in "
        "n_compressors, not n_defined, and never enters as 0; only ratio settings are averaged. The figure "
        "draws anchors dashed and structural metrics solid from FullCache (ratio 0, kept 1). onset: per "
        "task, reader, compressor and metric, the first setting in increasing compression (ratio, else 1 − "
        "retained share) whose paired drop = full_mean − comp_mean over its n sources is at least the "
        "threshold (--onset-drop), with the drop's bootstrap interval over those sources (drop_low, "
        "drop_high); 'none' with the reason when no setting reaches it; skipped names settings not "
        "scanned (no paired answers, or no compression order).",
        ("contrast_plot", "contrast_ratio_plot"),
        ("contrast", "contrast_by_ratio", "onset"),
        "no task in the selected runs declares an anchor/structural pair",
    ),
    Section(
        "audit",
        "Reader-upgrade audit",
        "Every reader answers the same rows on the raw evidence (raw = its FullCache answer on the supplied "
        "pool) and under the same evidence condition (a text compressor's artifact, a KV press, or an "
        "evidence swap 'A -> B' from --swap, where raw is condition A). A text compressor must have given "
        "every reader byte-identical evidence (artifact_check, else the panel is refused). Only rows that "
        "every reader completed count (n_rows). Each score the records carry is a metric: correct, score "
        "and the task's own (em and f1 for RAG tasks). gain = compressed − raw mean; rescue = raw-wrong "
        "answers made right, damage = raw-correct answers made wrong (binary metrics). For a reader pair, "
        "retention = comp_upgrade / raw_upgrade ('endpoints' = lowest vs highest raw reader, 'declared' = "
        "--pair), with exact McNemar p-values under each evidence. excess_flips = compressed minus raw "
        "reversal rate of eligible_pairs across random row halves (raw_reversal is the raw-replay flip "
        "baseline); eiv_r is the errors-in-variables corrected correlation of raw score with gain "
        "(negative: lower readers gain more), its interval resampling reader families with rows when the "
        "panel spans n_families > 1. In the plot the dashed diagonal is raw = compressed and rings mark "
        "the endpoint readers. outcome is ragscale's label of each compared upgrade, first rule that holds: "
        "not separated (|raw_upgrade| < 5 pp), reversed (raw and compressed upgrade of opposite sign), "
        "attenuated (retention below --retention-alert, default 0.75), else preserved; --fail-on makes the "
        "command exit 3 on the outcomes listed. audit_slices: the same upgrades within each value of a row "
        "hint (--slice-by; a scores file's hint columns), values with fewer than --min-slice-rows rows left "
        "out, retention N/A below 5 pp. audit_changed: the rows a binary metric's comparison changes, "
        "rescued (raw wrong, compressed right) or damaged (the reverse) for either reader, with both "
        f"readers' answers; the report shows the first {CHANGED_SHOWN} of each comparison, the CSV all. "
        + AUDIT_EXPLANATION,
        ("reader_scaling",),
        (
            "audit_readers",
            "audit_pairs",
            "audit_panel",
            "audit_heldout",
            "audit_floor",
            "audit_swap_difference",
            "audit_slices",
            "audit_changed",
        ),
        "no reader-upgrade audit (needs two or more readers sharing a task, evidence condition and setting)",
    ),
)

#: the TPBench section's paper tables (kvx.aggregate.tpbench.paper_tables), each shown when it applies
_TPBENCH_PAPER = (
    " Paper tables (a _seed_mean is the unweighted mean of the per-seed values): tpbench_p1_seeds "
    "(Table 23) = P1 strict, loose and token F1 as seed mean ± sample sd; tpbench_slot_types (Table 7) = "
    "P2-strict and retention per slot type, by keywords of the slot name (time, else date/day, else a "
    "place or name word, else other; unknown without a slot); tpbench_p3_alias_excluded (Table 9) = P3 "
    "on the same answers less the pairs P2's alias rule calls one value (n_by_seed, excluded_by_seed; "
    "best_* = the best turn selector at that budget); tpbench_p3_parsed (Table 10) = segment-local and "
    "whole-field P3, the parse rate and segment-local accuracy among parsed answers only; "
    "tpbench_evidence (§6.3, per probe set) = how often the update turn does not state the value, the "
    "evidence spans several turns, a system turn states it, and whether each method kept the update "
    "turn, only another answer-bearing turn, or neither; tpbench_kv_vs_selectors (Table 15) = each KV "
    "method per seed beside the best turn selector keeping the same fraction at that seed (ties joined "
    "by '/')."
)

#: sections of one benchmark's analyses: shown (and written as ``<anchor>.md``) only when the
#: analysis produced any of their tables or figures, absent from the report otherwise
OPTIONAL_SECTIONS: tuple[Section, ...] = (
    *(
        Section(anchor, heading, text, (), tables, "the audit did not run")
        for anchor, heading, text, tables in AUDIT_CONTROLS
    ),  # ragscale A.6-A.7, after the audit
    Section(
        "audit_draws",
        "Repeated artifact draws (ragscale Table 16, B.6)",
        "Evidence conditions that differ only by their draw (transform.draw=K of summary or replay) are "
        "one artifact drawn several times, each draw its own evidence condition of the reader-upgrade "
        "audit. Per task, compressor, setting and metric: n_draws and the draws, the lowest and highest "
        "endpoint retention (audit_pairs) and excess flips (audit_panel) over the draws, and the "
        "artifacts' integrity on the n_rows every draw has a text for: identical_share = rows whose text "
        "is byte-identical across all draws, pairwise_share_min/max = the lowest and highest share of "
        "rows two draws share byte for byte.",
        (),
        ("audit_draws",),
        "no repeated artifact draws",
    ),
    Section(
        "provenance",
        "External records: unknown fields",
        "Records converted from a ledger kvx did not write (provenance: external) may leave fields the "
        "ledger does not have null, each with the ledger's reason. They are never filled in: a check that "
        "needs an unknown field is skipped for those records (an unknown prompt hash is not compared across "
        "cells; an unknown seed or model revision is the label 'unknown'). records = how many external "
        "records leave the field unknown.",
        (),
        ("provenance",),
        "every record is kvx's own",
    ),
    Section(
        "kvdiagnosis",
        "Workloads and setting tiers (KVDiagnosis)",
        "A workload is KVDiagnosis's unit: RULER's tasks at one context length pool into one "
        "(ruler/* @8192 is RULER-8K; a RULER task without a recorded length, as the release "
        "imported per dataset, is its own), any other task pools with its task family, else stands alone. "
        "Tiers pool the settings the paper draws in one column: light = 75% retained (ratio 0.25) or "
        "8-bit QuantizedCache (hqq), intermediate = 50% or 4 bits, aggressive = 25% or 2 bits; a cell in "
        "no tier is listed in kvd_tiers with the reason (excluded) and pooled nowhere. kvd_accounting "
        "(Table 3): sources, records, N/A (n_unsupported), errors, runs (supported), n_fc = "
        "FullCache-correct supported pairs (FC-elig.), C→W rows and n_affected_sources = sources with at "
        "least one C→W row (Unique); Total sums the workloads. kvd_tiers (Figure 4A, Figure 10 left): "
        "cw_rate = Σ C→W / Σ n_fc over the tier's cells (an unsupported cell adds to neither). "
        "kvd_task_failures (Figure 5, Figure 10 right): C→W rows per task (numbered variants such as "
        "niah_single_1..3 pooled) and method (hqq's bit widths are one method) over all settings: "
        "composition counts, not difficulty. kvd_corpus (Table 12): each item's rows of the workload's "
        "C→W rows (n_cw): per tier, with a recorded coverage state and per state, with numeric ERR and "
        "ECov (a measured or projected map), with a valid EAR, and the methods with the most and fewest "
        "rows (ties joined by ' / '). kvd_workload_categories (Figure 7): Table 4 categories as shares of "
        "the workload's C→W rows (n_derived: derived here from stored values; a workload with no "
        "categorized row is one N/A row, named in the figure, never drawn at 0). kvd_modal_categories "
        "(Table 16): per cell the most frequent category of its C→W rows (ties joined by ' / '), "
        "modal_share = n_modal / n_cw, the coverage states of those rows and the ECov, ΔNLL and GPR means "
        "over rows where each is valid; reason says why a cell has none.",
        ("kvd_tier_heatmap", "kvd_tier_bars", "kvd_task_heatmap", "kvd_task_bars", "kvd_category_dots"),
        tuple(KVDIAGNOSIS_TABLES),
        "no compressed records in the selected runs",
    ),
    Section(
        "tpbench",
        "TPBench probes",
        "P1 asks for the user's initial goal, P2 for a slot's current value, P3 for both in one answer. A "
        "method is a turn selector, a turn deletion (delete:<which>) or a KV press; its budget is the turn "
        "fraction kept ('turns r') or the cache fraction kept ('cache r' = 1 − kvpress ratio): different "
        "units, never merged or ranked together. Full context is built once per source from the "
        "uncompressed controls. Scores are over supported answers (n); unsupported and errored answers are "
        "counted (n_unsupported, n_error), never scored. _accuracy pools every answer; _seed_mean and "
        "_seed_sd are the mean and sample sd of the per-seed accuracies (probe seeds); _ci_low/_ci_high a "
        "95% percentile interval from resampling dialogues, pooled across seeds. parse_failure_rate = 1 − "
        "parsed; superseded_rate (P2) = answers giving the value the user replaced; update_kept_rate = "
        "answers whose context kept the update turn. Rankings order methods within probe, corpus, reader "
        "and budget by seed-mean accuracy (1 = best, ties averaged). Spearman rho compares P1-strict (and "
        "P1-loose) with P2-strict over the methods present in both probes at the same budget (its budget "
        "column); the figure draws those ranks, solid lines for position-only selectors. Retention is the "
        "share of answers whose reference (P1: the first-turn sentence; P2/P3: the complete current value) "
        "survives in the compressed dialogue, with accuracy on the retained and the not-retained answers, "
        "pooled over seeds: each method is scored on the subset it kept, so these are no ranking. Deletions "
        "pair each evidence deletion with its matched control on the same sources (matched = 'k of n': k of "
        "the n sources the deletion scored have a scored control); b = control right and deletion wrong, "
        "c = the reverse, exact McNemar p (strict); the _fc columns repeat it among answers full context "
        "got right." + _TPBENCH_PAPER + " " + GAP_EXPLANATION,
        ("tpbench_rank_change",),
        (*TPBENCH_TABLES, *TPBENCH_PAPER_TABLES, *GAP_TABLES),
        "no TPBench records in the selected runs",
    ),
    Section(
        "judges",
        "Judges",
        "A judge (judge=<name>, kvx.judges) decides each supported record's two answers beside the task's "
        "own scorer; the matrix shows judge.<name>.accuracy next to accuracy, over the n_judged answers it "
        "judged (FullCache rows: over the judged controls). judge_agreement sets the judge against the "
        "task's deterministic correct per task, reader and judge, on the FullCache controls (once per "
        "source), the compressed answers and both together (all). yes/no is the judge's decision, "
        "correct/incorrect the scorer's; an uncertain judgment is a no (no credit, still counted: "
        "n_uncertain, uncertain_correct, uncertain_incorrect). agreement = (yes_correct + no_incorrect) / "
        "n_judged; kappa is Cohen's κ = (p_o − p_e) / (1 − p_e) with p_e the agreement the two marginals "
        "give by chance, N/A when p_e = 1 or nothing was judged. Answers the judge could not judge are "
        "counted, never scored: n_error (the request failed or the reply could not be read) and "
        "n_not_applicable (the judge does not apply to the source), out of n_answers.",
        (),
        ("judge_agreement",),
        "no judged answers in the selected runs",
    ),
    Section(
        "kvdiagnosis_extra",
        "KVDiagnosis: paired cases, context demand, cross-reader coverage, PyramidKV audit",
        kvd_extra.EXPLANATION,
        kvd_extra.FIGURES,
        kvd_extra.TABLES,
        "no C→W rows with a diagnostic category and no KVDiagnosis release tables",
    ),
)

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2rem auto;
max-width:1200px;padding:0 1rem;color:#222;line-height:1.45}
h1{margin-bottom:.2rem}h2{border-bottom:2px solid #ddd;padding-bottom:.2rem;margin-top:2.5rem}
table{border-collapse:collapse;margin:.6rem 0 1.2rem;font-size:.82rem}
th,td{border:1px solid #ccc;padding:.2rem .45rem;vertical-align:top}
th{background:#f0f0f0;position:sticky;top:0}tr:nth-child(even) td{background:#fafafa}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.scroll{overflow-x:auto;max-height:36rem;overflow-y:auto}
figure{margin:1rem 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.8rem;color:#555}.empty{color:#666;font-style:italic}
.explain{background:#f7f9fc;border-left:4px solid #0072B2;padding:.5rem .8rem}
.error{color:#b00020;font-weight:600}.warning{color:#8a5a00;font-weight:600}
th button{font:inherit;color:inherit;background:none;border:0;padding:0;margin:0;cursor:pointer;
text-align:inherit}th button::after{content:"\\a0\\21C5";color:#999}
th[aria-sort=ascending] button::after{content:"\\a0\\25B2";color:inherit}
th[aria-sort=descending] button::after{content:"\\a0\\25BC";color:inherit}
"""

# Sorts a table.sortable by the clicked header: cells marked class="num" as numbers, others as text
# (numeric-aware collation); "N/A" and empty cells stay last in either direction. Headers become
# buttons at load (keyboard and screen readers); the sorted header carries aria-sort.
_SORT_JS = """
(function(){
var text=new Intl.Collator("en",{numeric:true,sensitivity:"base"});
function key(td){
  var s=td?td.textContent.trim():"";
  if(s===""||s==="N/A")return null;
  if(!td.classList.contains("num"))return s;
  var v=s==="inf"?Infinity:s==="-inf"?-Infinity:Number(s);
  return isNaN(v)?null:v;
}
function order(a,b){
  if(typeof a==="number"&&typeof b==="number")return a<b?-1:a>b?1:0;
  if(typeof a==="number")return -1;
  if(typeof b==="number")return 1;
  return text.compare(a,b);
}
function sort(th){
  var table=th.closest("table"),body=table.tBodies[0],col=th.cellIndex;
  var dir=th.getAttribute("aria-sort")==="ascending"?-1:1;
  var rows=Array.prototype.map.call(body.rows,function(tr,i){return [key(tr.cells[col]),i,tr];});
  rows.sort(function(a,b){
    if(a[0]===null||b[0]===null)return (a[0]===null)-(b[0]===null)||a[1]-b[1];
    return dir*order(a[0],b[0])||a[1]-b[1];
  });
  var heads=table.tHead.rows[0].cells;
  for(var j=0;j<heads.length;j++)heads[j].removeAttribute("aria-sort");
  th.setAttribute("aria-sort",dir>0?"ascending":"descending");
  var frag=document.createDocumentFragment();
  rows.forEach(function(r){frag.appendChild(r[2]);});
  body.appendChild(frag);
}
document.querySelectorAll("table.sortable>thead>tr>th").forEach(function(th){
  var b=document.createElement("button");
  b.type="button";
  b.title="Sort by this column";
  while(th.firstChild)b.appendChild(th.firstChild);
  th.appendChild(b);
});
document.addEventListener("click",function(e){
  var th=e.target.closest&&e.target.closest("table.sortable>thead>tr>th");
  if(th)sort(th);
});
})();
"""


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub Markdown table in display formatting (written here: ``tabulate`` is not a dependency)."""
    if frame.columns.empty:
        return "_(empty table)_\n"
    headers, numeric, rows = _display(frame)
    lines = [
        _md_row(headers),
        _md_row(["---:" if n else "---" for n in numeric]),
        *(_md_row(row) for row in rows),
    ]
    return "\n".join(lines) + "\n"


def write_tables(tables: Mapping[str, pd.DataFrame], out: Path) -> dict[str, tuple[Path, Path]]:
    """Write ``<name>.csv`` (full precision, NaN empty) and ``<name>.md`` for every table.

    Floats are written as shortest round-trip reprs; ``pd.read_csv(..., float_precision="round_trip")``
    reads them back bit for bit (pandas' default parser can be off by one ulp).
    """
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, frame in tables.items():
        csv_path, md_path = out / f"{name}.csv", out / f"{name}.md"
        _integral_counts(frame).to_csv(csv_path, index=False, na_rep="")
        md_path.write_text(markdown_table(frame), encoding="utf-8")
        written[name] = (csv_path, md_path)
    return written


def write_html(
    tables: Mapping[str, pd.DataFrame],
    figures: Mapping[str, Sequence[Path]],
    out: Path,
    title: str,
    meta: Mapping[str, str],
) -> Path:
    """Write one self-contained ``report.html``: inline CSS, base64 images (lazily decoded, sized from
    their PNG headers) and one small inline script that sorts tables by a clicked header; no remote
    links, so the page works offline from ``file://``.

    Tables link to their CSV files in ``out`` by relative href when those files exist.
    """
    out.mkdir(parents=True, exist_ok=True)
    sections = (*SECTIONS, *(s for s in OPTIONAL_SECTIONS if _has_content(s, tables, figures)))
    shown = {name for section in (*SECTIONS, *OPTIONAL_SECTIONS) for name in section.tables} | {"problems"}
    extra = {name: frame for name, frame in tables.items() if name not in shown}
    toc = [("validation", "Validation"), *((s.anchor, s.heading) for s in sections)]
    if extra:
        toc.append(("other", "Other tables"))
    body = [
        f"<h1>{_esc(title)}</h1>",
        _meta_html(meta),
        _toc_html(toc),
        _validation_html(tables.get("problems", pd.DataFrame()), out),
        *(_section_html(s, tables, figures, out) for s in sections),
    ]
    if extra:
        body.append(_other_html(extra, out))
    document = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{_esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + f"\n<script>{_SORT_JS}</script>\n</body>\n</html>\n"
    )
    path = out / "report.html"
    path.write_text(document, encoding="utf-8")
    return path


def write_section_markdown(
    tables: Mapping[str, pd.DataFrame], figures: Mapping[str, Sequence[Path]], out: Path
) -> list[Path]:
    """Write ``<anchor>.md`` for every optional section with content: its heading, explanation,
    figures (relative links) and tables in display formatting, readable without the HTML report."""
    written = []
    for section in OPTIONAL_SECTIONS:
        if not _has_content(section, tables, figures):
            continue
        parts = [f"# {section.heading}\n", f"{section.explanation}\n"]
        for key in section.figures:
            parts.extend(f"![{path.stem}]({quote(path.name)})\n" for path in figures.get(key, ()))
        for name in section.tables:
            if name in tables:
                parts.append(f"## {name}\n\n" + markdown_table(tables[name]))
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{section.anchor}.md"
        path.write_text("\n".join(parts), encoding="utf-8")
        written.append(path)
    return written


def _has_content(
    section: Section, tables: Mapping[str, pd.DataFrame], figures: Mapping[str, Sequence[Path]]
) -> bool:
    return any(name in tables for name in section.tables) or any(figures.get(k) for k in section.figures)


def _integral_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """Counts made float only by NaN cells are written as "12", not "12.0" (same values read back)."""
    converted = {}
    for name in frame.columns:
        column = frame[name]
        if _kind(str(name), column) == "count" and column.dtype.kind == "f":
            values = column.dropna()
            if np.isfinite(values).all() and (values == values.round()).all():
                converted[name] = column.astype("Int64")
    return frame.assign(**converted) if converted else frame


# --- display formatting --------------------------------------------------------------------------


def _kind(name: str, column: pd.Series) -> str:
    """How a column is displayed: 'p', 'percent', 'count', 'float' or 'text'."""
    if is_bool_dtype(column) or not is_numeric_dtype(column):
        return "text"
    if _P_VALUE.search(name):
        return "p"
    if _COUNT.search(name) or is_integer_dtype(column):  # before percent: retention_undefined_draws
        return "count"
    if _PERCENT.search(name):
        return "percent"
    return "float"


def _is_missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float | np.floating) and np.isnan(value))


def _format(kind: str, value: object) -> str:
    if _is_missing(value):
        return NA
    if kind == "text":
        return str(value)
    number = float(value)
    if not np.isfinite(number):
        return str(number)
    if kind == "percent":
        return f"{100 * number:.1f}"
    if kind == "p":
        return f"{number:.3g}" if number == 0 or number >= 1e-3 else f"{number:.2e}"
    if kind == "count" and number.is_integer():
        return str(int(number))
    return _format_float(number)


def _format_float(number: float) -> str:
    """Three decimals in the usual range, 3 significant digits (scientific) far outside it."""
    if number == 0 or 1e-3 <= abs(number) < 1e5:
        return f"{number:.3f}"
    return f"{number:.3g}"


def _display(frame: pd.DataFrame) -> tuple[list[str], list[bool], list[list[str]]]:
    """Headers (percent columns marked '(%)'), right-alignment flags and formatted cells."""
    kinds = [_kind(str(name), frame[name]) for name in frame.columns]
    headers = [f"{name} (%)" if kind == "percent" else str(name) for name, kind in zip(frame.columns, kinds)]
    rows = [
        [_format(kind, value) for kind, value in zip(kinds, record)]
        for record in frame.itertuples(index=False, name=None)
    ]
    return headers, [kind != "text" for kind in kinds], rows


def _md_row(cells: Sequence[str]) -> str:
    escaped = (c.replace("|", "\\|").replace("\r", " ").replace("\n", " ") for c in cells)
    return "| " + " | ".join(escaped) + " |"


# --- HTML pieces ---------------------------------------------------------------------------------


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _meta_html(meta: Mapping[str, str]) -> str:
    rows = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in meta.items())
    return f'<table class="meta">{rows}</table>' if rows else ""


def _toc_html(entries: Sequence[tuple[str, str]]) -> str:
    items = "".join(f'<li><a href="#{_esc(anchor)}">{_esc(heading)}</a></li>' for anchor, heading in entries)
    return f'<nav><h2 id="contents">Contents</h2><ol>{items}</ol></nav>'


def _validation_html(problems: pd.DataFrame, out: Path) -> str:
    head = '<h2 id="validation">Validation</h2>'
    if problems.empty:
        return f'{head}<p class="empty">No problems found: every record passed validation.</p>'
    counts = problems["severity"].astype(str).value_counts()
    summary = ", ".join(f'<span class="{_esc(sev)}">{n} {_esc(sev)}</span>' for sev, n in counts.items())
    return (
        f"{head}<p>{len(problems)} validation finding(s): {summary}. Errors mark records left out of the "
        "analysis; warnings mark records kept.</p>" + _table_html("problems", problems, out)
    )


def _section_html(
    section: Section, tables: Mapping[str, pd.DataFrame], figures: Mapping[str, Sequence[Path]], out: Path
) -> str:
    parts = [f'<h2 id="{_esc(section.anchor)}">{_esc(section.heading)}</h2>']
    parts.append(f'<p class="explain">{_esc(section.explanation)}</p>')
    images = [path for key in section.figures for path in figures.get(key, ())]
    present = {name: tables[name] for name in section.tables if name in tables and not tables[name].empty}
    if not images and not present:
        parts.append(f'<p class="empty">{_esc(section.empty[0].upper() + section.empty[1:])}.</p>')
        return "\n".join(parts)
    parts.extend(_figure_html(path) for path in images)
    for name in section.tables:
        if name in present:
            parts.append(_table_html(name, SHOWN.get(name, _all)(present[name]), out))
        else:
            parts.append(f'<h3>{_esc(name)}</h3><p class="empty">No rows.</p>')
    return "\n".join(parts)


def _all(frame: pd.DataFrame) -> pd.DataFrame:
    return frame


#: tables the report shows a part of (the CSV holds every row)
SHOWN = {"audit_changed": first_changed}


def _other_html(extra: Mapping[str, pd.DataFrame], out: Path) -> str:
    parts = ['<h2 id="other">Other tables</h2>']
    parts.extend(_table_html(name, frame, out) for name, frame in extra.items())
    return "\n".join(parts)


def _png_size(data: bytes) -> tuple[int, int] | None:
    """Pixel (width, height) from a PNG's IHDR chunk (bytes 16..24, big-endian); None if not a PNG."""
    if len(data) < 24 or data[:8] != PNG_MAGIC or data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])


def _figure_html(path: Path) -> str:
    """An inline image; lazy and async so long reports open fast, sized so layout does not jump."""
    raw = path.read_bytes()
    mime = mimetypes.guess_type(path.name)[0] or "image/png"
    data = base64.b64encode(raw).decode("ascii")
    size = _png_size(raw)
    dims = f' width="{size[0]}" height="{size[1]}"' if size else ""
    return (
        f'<figure><img src="data:{mime};base64,{data}" alt="{_esc(path.stem)}"{dims} loading="lazy" '
        f'decoding="async"><figcaption>{_esc(path.name)}</figcaption></figure>'
    )


def _table_html(name: str, frame: pd.DataFrame, out: Path) -> str:
    """A table in the Markdown formatting, capped at MAX_HTML_ROWS, with links to its files."""
    links = [
        f'<a href="{_esc(quote(name))}.{ext}">{_esc(name)}.{ext}</a>'
        for ext in ("csv", "md")
        if (out / f"{name}.{ext}").exists()
    ]
    head = f"<h3>{_esc(name)}</h3>" + (f"<p>Download: {' · '.join(links)}</p>" if links else "")
    if frame.columns.empty:
        return head + '<p class="empty">No rows.</p>'
    headers, numeric, rows = _display(frame.head(MAX_HTML_ROWS))
    note = ""
    if len(frame) > MAX_HTML_ROWS:
        note = (
            f'<p class="empty">Showing the first {MAX_HTML_ROWS} of {len(frame)} rows; the CSV holds all.</p>'
        )
    th = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(_td(cell, num) for cell, num in zip(row, numeric)) + "</tr>" for row in rows
    )
    table = f'<table class="sortable"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'
    return f'{head}{note}<div class="scroll">{table}</div>'


def _td(cell: str, numeric: bool) -> str:
    return f'<td class="num">{_esc(cell)}</td>' if numeric else f"<td>{_esc(cell)}</td>"
