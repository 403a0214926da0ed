"""TPBench (turning points in dialogue compression): probes P1-P3 on annotated task dialogues."""
