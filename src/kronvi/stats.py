r"""The sufficient statistics every fit starts from, $(n, y^\top y, \Phi^\top y, \Phi^\top\Phi)$.

`regression_stats` accumulates them in row chunks with compensated sums (`regression_stats_from_inputs`
from inputs and a feature map, `regression_stats_from_chunks` from a stream of row blocks);
`merge_stats` and `subtract_stats` add and remove rows; `kfold_stats` gives the statistics of K folds in
one pass. `eigenbasis` rotates the statistics to the eigenbasis of $\Phi^\top\Phi$, where the default recipe
discretizes the weights (`eigenbasis_from_inputs`: from the inputs and a feature map, by the cheaper of
two routes), and `rotate_features` maps features into it.
"""

from ._stats.eigen import Eigenbasis as Eigenbasis
from ._stats.eigen import eigenbasis as eigenbasis
from ._stats.eigen import eigenbasis_from_inputs as eigenbasis_from_inputs
from ._stats.eigen import rotate_features as rotate_features
from ._stats.regression import RegressionStats as RegressionStats
from ._stats.regression import kfold_stats as kfold_stats
from ._stats.regression import kfold_stats_from_inputs as kfold_stats_from_inputs
from ._stats.regression import merge_stats as merge_stats
from ._stats.regression import regression_stats as regression_stats
from ._stats.regression import regression_stats_from_inputs as regression_stats_from_inputs
from ._stats.regression import subtract_stats as subtract_stats
from ._stats.streaming import regression_stats_from_chunks as regression_stats_from_chunks

__all__ = [
    "RegressionStats",
    "regression_stats",
    "regression_stats_from_inputs",
    "regression_stats_from_chunks",
    "merge_stats",
    "subtract_stats",
    "kfold_stats",
    "kfold_stats_from_inputs",
    "Eigenbasis",
    "eigenbasis",
    "eigenbasis_from_inputs",
    "rotate_features",
]
