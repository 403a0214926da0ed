"""``save_png`` lays a figure out and draws it once, and writes the PNG ``savefig`` would."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

from kvx.aggregate.publish.canvas import PNG_OPTIONS, save_png


def _figure() -> Figure:
    fig = Figure(figsize=(3, 2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.imshow([[0.0, 1.0], [2.0, 3.0]])
    ax.set_yticks([0, 1], labels=["a long compressor name", "b"])
    ax.set_title("title")
    fig.colorbar(ax.images[0], ax=ax, label="label")
    return fig


def test_save_png_is_byte_identical_to_savefig(tmp_path: Path) -> None:
    reference = tmp_path / "reference.png"
    _figure().savefig(reference, dpi=150, pil_kwargs=dict(PNG_OPTIONS))
    path = save_png(_figure(), tmp_path / "nested" / "once.png", 150)
    assert path.read_bytes() == reference.read_bytes()


def test_fast_deflate_keeps_every_pixel(tmp_path: Path) -> None:
    default = tmp_path / "default.png"
    _figure().savefig(default, dpi=150)  # matplotlib's own deflate level
    fast = save_png(_figure(), tmp_path / "fast.png", 150)
    assert fast.read_bytes() != default.read_bytes()  # a different encoding ...
    with Image.open(default) as a, Image.open(fast) as b:
        assert np.array_equal(np.asarray(a), np.asarray(b))  # ... of the same image


def test_save_png_draws_once(tmp_path: Path) -> None:
    fig = _figure()
    draws = []
    fig.draw = lambda renderer, _draw=fig.draw: draws.append(1) or _draw(renderer)  # type: ignore[method-assign]
    save_png(fig, tmp_path / "once.png", 150)
    assert len(draws) == 1
