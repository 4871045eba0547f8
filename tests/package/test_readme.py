"""The README's usage example runs as written (a smaller feature count keeps it fast)."""

import pathlib
import re

import numpy as np


def test_readme_example_runs():
    readme = pathlib.Path(__file__).resolve().parents[2] / "README.md"
    code = re.search(r"## Using it\n\n```python\n(.*?)```", readme.read_text(), re.S).group(1)
    assert "DirectConfig()" in code
    code = code.replace("DirectConfig()", "DirectConfig(num_frequencies=50)")
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    mean, var = np.asarray(namespace["mean"]), np.asarray(namespace["var"])
    y, test = np.asarray(namespace["y"]), np.asarray(namespace["test"])
    assert mean.shape == (int(test.sum()),) and np.all(var > 0)
    assert np.sqrt(np.mean((mean - y[test]) ** 2)) < 0.5 * np.std(y)
