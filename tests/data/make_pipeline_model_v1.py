"""Writes `pipeline_model_v1.npz`: a default-recipe pipeline model saved as users saved one before
`save_model` took a whole `FittedDirect` (a `DirectModel` with the standardizer, the feature map and the
eigenbasis under `features`, and 4-bit samples). Written once by kronvi at commit dd18818; kept so that
`tests/quantize/test_io.py` proves such files still load and predict the numbers printed below.

    python tests/data/make_pipeline_model_v1.py
"""

from pathlib import Path

import jax
import numpy as np

import kronvi
from kronvi import pipeline


def main():
    X, y, mask = kronvi.load_demo()
    test = mask[:, 0].astype(bool)
    config = pipeline.DirectConfig(num_frequencies=4, gp=pipeline.GPOptions(restarts=1, points=100))
    model, _, _ = pipeline.fit_direct(jax.random.key(0), X[~test], y[~test], config)
    codes = kronvi.quantize.sample_codes(jax.random.key(1), model.q_w, 3)
    saved = kronvi.DirectModel(
        model.prior_w, model.prior_noise, model.q_w, model.q_noise,
        features={"standardizer": model.standardizer, "rff": model.features, "basis": model.basis},
        y_offset=model.y_offset, packed_codes=kronvi.quantize.pack_codes(codes), bits=4,
    )  # fmt: skip
    path = Path(__file__).with_name("pipeline_model_v1.npz")
    kronvi.save_model(path, saved)
    Phi = pipeline.fold_features(model, X[test][:3])
    mean, var = kronvi.model.predict_regression(
        model.q_w, model.q_noise, model.prior_w, model.prior_noise, Phi
    )
    print("rows", np.flatnonzero(test)[:3].tolist())
    print("mean", [float(v) for v in mean])
    print("var", [float(v) for v in var])
    print("codes", np.asarray(codes).tolist())
    print(path, path.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
