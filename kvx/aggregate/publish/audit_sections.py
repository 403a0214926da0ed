"""The report's sections for the audit controls (``kvx.aggregate.ragscale.controls``, ragscale
A.6-A.7): one (anchor, heading, tables) per control, shown only when it ran; each one's explanation is
``kvx/aggregate/prose/{anchor}.md``."""

from __future__ import annotations

SECTIONS = (
    ("control_nulls", "Audit control: order-preserving nulls (ragscale Table 5)", ("audit_nulls",)),
    ("control_transitions", "Audit control: transition homogeneity (ragscale A.6)", ("audit_transitions",)),
    (
        "control_resolution",
        "Audit control: resolution retention and cost (ragscale Table 6)",
        ("audit_resolution",),
    ),
    ("control_screen", "Audit control: three-reader screen validation (ragscale Table 7)", ("audit_screen",)),
    (
        "control_predictive",
        "Audit control: spacing vs instability index, leave one cell out (after ragscale Table 18)",
        ("audit_predictive", "audit_predictive_cells"),
    ),
)
