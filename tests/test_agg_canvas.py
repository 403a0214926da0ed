"""``save_png`` lays a figure out and draws it once, and writes the PNG ``savefig`` would."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from kvx.aggregate.publish.canvas import save_png


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
    _figure().savefig(reference, dpi=150)
    path = save_png(_figure(), tmp_path / "nested" / "once.png", 150)
    assert path.read_bytes() == reference.read_bytes()


def test_save_png_draws_once(tmp_path: Path) -> None:
    fig = _figure()
    draws = []
    fig.draw = lambda renderer, _draw=fig.draw: draws.append(1) or _draw(renderer)  # type: ignore[method-assign]
    save_png(fig, tmp_path / "once.png", 150)
    assert len(draws) == 1
