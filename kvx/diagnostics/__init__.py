"""Diagnostics: measurements attached to compressed records (KVDiagnosis section 4)."""
