"""What the report says about the audit controls (``kvx.aggregate.ragscale.controls``, ragscale
A.6-A.7): one (anchor, heading, explanation, tables) per control, shown only when it ran."""

from __future__ import annotations

_SPLITS = (
    "Splits are the audit's seeded row halves (selection = the first n // 2 rows of each permutation, "
    "scoring = the rest); a pair is raw-separated when its raw selection-half gap is at least 5pp. "
)

SECTIONS = (
    (
        "control_nulls",
        "Audit control: order-preserving nulls (ragscale Table 5)",
        _SPLITS + "obs_excess = compressed minus raw reversal rate, obs_both_rate = share of raw-separated "
        "pairs whose compressed order opposes the raw order on both halves (median, 2.5-97.5 percentiles "
        "over --splits splits of the calibration seed = --seed + 1). Each null keeps the raw outcomes: "
        "independent_uniform (binary scores only) rescues each raw-wrong cell with the pooled rescue rate "
        "(rescued / raw-wrong cells) and damages each raw-correct cell with the pooled damage rate, "
        "independently; row_exchangeable permutes each row's compressed scores among readers with the same "
        "raw score. Each is drawn --null-draws times and replayed over the first --null-splits splits; "
        "null_* = median and 2.5-97.5 percentiles over draws of each draw's split medians; exceeded_share = "
        "share of draws whose both-half rate the observed one exceeds.",
        ("audit_nulls",),
    ),
    (
        "control_transitions",
        "Audit control: transition homogeneity (ragscale A.6)",
        "Per reader, rescue rate = rescued / raw-wrong cells and damage rate = damaged / raw-correct cells "
        "(binary scores); _min, _max and _sd (ddof 1) over readers. rescued_chi2 / damaged_chi2: Pearson "
        "chi-square of readers x {event, not} among each reader's eligible cells (no continuity "
        "correction), with dof and p: a small p rejects one shared rate, the independent-uniform null's "
        "premise.",
        ("audit_transitions",),
    ),
    (
        "control_resolution",
        "Audit control: resolution retention and cost (ragscale Table 6)",
        _SPLITS + "same_share / opposite_share: on each selection half (n_half_rows), among pairs an exact "
        "two-sided McNemar test (p < .05, no continuity or mid-p) separates on raw evidence, the share it "
        "separates in the same / opposite direction on compressed evidence (binary scores; median and "
        "2.5-97.5 percentiles over halves). question_ratio = median over pairs with |raw upgrade| >= 5pp of "
        "Var(D_comp) / Var(D_raw) / rho^2 (D = per-row score difference of the pair, rho = its retention; "
        "rho <= 0 excluded and counted); crossfit_question_ratio selects pairs on one half and estimates on "
        "the other (per-split median; low/high over splits). token_cost_ratio = median over pairs of the "
        "pair's ratio times its mean compressed / raw prompt-token ratio (served readers' billed prompt "
        "tokens; token_status says when there are none), with its interquartile range.",
        ("audit_resolution",),
    ),
    (
        "control_screen",
        "Audit control: three-reader screen validation (ragscale Table 7)",
        _SPLITS + "On each selection half the screen takes the lowest and highest raw readers and the "
        "reader closest to their midpoint (a different family preferred). A rule expands when endpoint or "
        "admissible adjacent-pair retention on the scoring half is below retention_floor, excess flips "
        "exceed excess_limit, a raw-separated pair reverses under compression, or a required estimate is "
        "missing; the broader panel applies the same rule to every reader. false_reassurance_share = "
        "splits where the screen is negative while the panel expands (_of_expand: among splits where the "
        "panel expands); n_false_triplets = triplet identities with any such split; visible_share = share "
        "of the panel's compressed reversals whose two readers are both in that split's triplet.",
        ("audit_screen",),
    ),
    (
        "control_predictive",
        "Audit control: spacing vs instability index, leave one cell out (after ragscale Table 18)",
        "kvx's own definition (the paper names but does not define its frozen index): a cell is an audited "
        "panel and metric with 3+ readers and an excess-flip median; spacing = median adjacent gap of sorted "
        "raw reader means; dispersion = cross-reader SD of gains; class_dispersion = the mean dispersion of "
        "the other cells with the same compressor (else all other cells). Baseline: excess ~ spacing; "
        "index: excess ~ class_dispersion / spacing; each an OLS line fitted on the other cells of the "
        "metric, scored by absolute error on the held-out one. mae_difference = index - baseline mean "
        "error (positive: spacing predicts better), its interval resampling tasks.",
        ("audit_predictive", "audit_predictive_cells"),
    ),
)
