"""The figures the docs site shows (docs/figures/) are byte copies of the committed study outputs they name."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIGURES = {"docs/figures/peers_rmse_time.png": "experiments/results/peers_rmse_time.png"}


def test_every_docs_figure_is_its_study_output():
    shown = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "figures").iterdir())
    assert shown == sorted(FIGURES)  # a figure added to the docs names its source here
    for copy, source in FIGURES.items():
        assert (ROOT / copy).read_bytes() == (ROOT / source).read_bytes(), f"{copy}: copy {source} again"
