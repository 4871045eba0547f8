"""The pipeline's answer does not depend on the environment's BLAS thread count."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

SCRIPT = textwrap.dedent(
    """
    import json, jax, numpy as np, kronvi
    from kronvi import pipeline
    X, y, mask = kronvi.load_demo()
    test = mask[:, 0].astype(bool)
    config = pipeline.DirectConfig(num_frequencies=150, gp_restarts=1)  # the GP on all 277 rows
    model, _, _ = pipeline.fit_direct(jax.random.key(0), X[~test], y[~test], config)
    Phi = pipeline.fold_features(model, X[test])
    mean, var = kronvi.predict_regression(model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi)
    print(json.dumps(dict(lengthscales=np.asarray(model.hyper.lengthscales).tolist(),
                          mean=np.asarray(mean).tolist(), var=np.asarray(var).tolist())))
    """
)


def _run(threads):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_same_seed_same_answer_with_any_blas_thread_count():
    one, two = _run(1), _run(2)
    # The GP fit runs its LAPACK calls single-threaded whatever the environment says: the same optimum.
    assert one["lengthscales"] == two["lengthscales"]
    np.testing.assert_allclose(one["mean"], two["mean"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(one["var"], two["var"], rtol=1e-4)
