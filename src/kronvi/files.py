r"""The files kronvi writes, and JAX's persistent compilation cache.

Every file kronvi writes (`kronvi.save_model`, `kronvi fit --json`, the studies in `experiments/`) follows
one rule: `check_output_path` checks the path before any compute and `write_atomic` writes it atomically,
keeping the permissions of a file it replaces. `enable_compilation_cache` turns on JAX's persistent
compilation cache, so that a second process reuses the programs the first compiled.
"""

from ._base.cache import enable_compilation_cache as enable_compilation_cache
from ._base.files import check_output_path as check_output_path
from ._base.files import write_atomic as write_atomic

__all__ = [
    "check_output_path",
    "write_atomic",
    "enable_compilation_cache",
]
