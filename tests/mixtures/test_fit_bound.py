"""L-BFGS on the Theorem-3 bound on a bimodal posterior."""

import jax
import numpy as np
import pytest
from helpers import (
    bimodal_problem,
    ref_mixture_elbo,
)

import kronvi


@pytest.mark.parametrize("method", ["lbfgs", "optax-lbfgs"])
def test_fit_mixture_bound(method):
    with jax.enable_x64(True):
        p, stats, prior_w, prior_n, log_z, q0 = bimodal_problem()
        q_w, q_n, info_mf = kronvi.fitting.fit_regression(stats, prior_w, prior_n, anneal_sweeps=20)
        mf = float(info_mf.final_elbo)
        # From a one-component mixture at the mean-field optimum the bound is the mean-field ELBO.
        q_mf = kronvi.mixtures.Mixture.from_mean_field(q_w)
        at_mf = kronvi.mixtures.mixture_elbo_bound(stats, q_mf, q_n, q_mf.log_marginals, prior_w, prior_n)
        np.testing.assert_allclose(float(at_mf), mf, rtol=1e-10)

        q, q_n2, log_c, info = kronvi.mixtures.fit_mixture_bound(
            stats, prior_w, prior_n, init=(q0, q_n), method=method, max_iter=300
        )
        final = float(info.final_elbo)
        assert final > float(info.elbo[0])
        np.testing.assert_allclose(
            final,
            float(kronvi.mixtures.mixture_elbo_bound(stats, q, q_n2, log_c, prior_w, prior_n)),
            rtol=1e-10,
        )
        exact = ref_mixture_elbo(
            p, np.asarray(q.logits), np.asarray(q.weight_logits), np.asarray(q_n2.logits)
        )
        assert final <= exact <= log_z + 1e-9
        assert final > mf + 0.4  # captures both modes: ~ +0.5 nats over mean field
        np.testing.assert_allclose(np.sort(np.asarray(q.weights)), [0.39, 0.61], atol=0.02)
