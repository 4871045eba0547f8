"""`kronvi.enable_compilation_cache`: where the cache goes, what it writes, and that a second process reads it."""

import os
import subprocess
import sys
import textwrap

import pytest

import kronvi
from kronvi._base.cache import default_cache_dir


def test_default_folder_respects_jax_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jaxdir"))
    assert default_cache_dir() == tmp_path / "jaxdir"
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    folder = default_cache_dir()
    assert folder.parent == tmp_path / "xdg" / "kronvi" / "jax"
    assert "/" not in folder.name and folder.name  # one folder per user and host
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir().parent == tmp_path / "home" / ".cache" / "kronvi" / "jax"


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(min_compile_time_secs=-1.0), "min_compile_time_secs"),
        (dict(min_compile_time_secs="soon"), "min_compile_time_secs"),
        (dict(min_entry_size_bytes=-5), "min_entry_size_bytes"),
        (dict(min_entry_size_bytes=1.5), "min_entry_size_bytes"),
    ],
)
def test_bad_thresholds_name_the_argument(tmp_path, kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        kronvi.enable_compilation_cache(tmp_path, **kwargs)


_CHILD = textwrap.dedent(
    """
    import sys
    import jax, jax.numpy as jnp
    from jax import monitoring
    import kronvi
    hits = []
    monitoring.register_event_listener(lambda e, **kw: hits.append(e) if e.endswith("cache_hits") else None)
    jnp.ones(3).block_until_ready()  # a program compiled before the call: the call still takes effect
    print(kronvi.enable_compilation_cache(sys.argv[1]))
    stats = kronvi.stats.regression_stats(jnp.ones((6, 2)), jnp.arange(6.0))
    jax.block_until_ready(stats)
    print(len(hits))
    """
)


def test_programs_are_written_and_read_back_by_the_next_process(tmp_path):
    folder = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}

    def run():
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(folder)], env=env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr
        path, hits = out.stdout.split()
        return path, int(hits)

    path, hits = run()
    assert path == str(folder) and hits == 0
    assert (os.stat(folder).st_mode & 0o777) == 0o700
    assert any(name.endswith("-cache") for name in os.listdir(folder))
    assert run()[1] > 0
