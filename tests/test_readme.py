"""The README's usage example runs as written (a smaller feature count keeps it fast)."""

import pathlib
import re

import numpy as np


def test_readme_example_runs():
    readme = pathlib.Path(__file__).resolve().parents[1] / "README.md"
    code = re.search(r"## Using it\n\n```python\n(.*?)```", readme.read_text(), re.S).group(1)
    code = code.replace("1000)", "100)").replace("2000,", "200,")
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    mean, var = namespace["mean"], namespace["var"]
    assert mean.shape == (308,) and np.all(np.asarray(var) > 0)
    y = namespace["y"]
    assert np.sqrt(np.mean((np.asarray(mean) - (y - y.mean())) ** 2)) < 0.5 * np.std(y)
