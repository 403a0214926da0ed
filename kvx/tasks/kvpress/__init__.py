"""kvpress's evaluation datasets as kvx tasks (NVIDIA/kvpress ``evaluation/``): one task per
benchmark, its subset a field, its rows in kvpress's format and each scored with the benchmark's
official metric (``dataset.py``: the shared loader and base class; ``<benchmark>_metrics.py``)."""
