"""experiments/README.md names every script and every result file under experiments/."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_names_every_script_and_result_file():
    text = (ROOT / "README.md").read_text()
    files = [
        p
        for p in sorted(ROOT.rglob("*"))
        if p.is_file()
        and "tests" not in p.relative_to(ROOT).parts
        and "__pycache__" not in p.parts
        and p.name != "README.md"
        and (p.suffix == ".py" or "results" in p.relative_to(ROOT).parts)
    ]
    assert len(files) > 50
    missing = [str(p.relative_to(ROOT)) for p in files if p.name not in text]
    assert missing == []
