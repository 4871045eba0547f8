"""The top level teaches: `kronvi.__all__` is the front door and the namespaces; each namespace's `__all__`
is exactly what its page in `docs/api/` documents, and the front-door page exactly `kronvi.__all__` (no
allow-list); the names that were top-level until this release still resolve, with a warning."""

import importlib
import inspect
import json
import os
import pathlib
import re

import pytest
from helpers import run_python

import kronvi

ROOT = pathlib.Path(kronvi.__file__).resolve().parents[2]
API = ROOT / "docs" / "api"
_DIRECTIVE = re.compile(r"^::: (\S+)\n((?:    .*\n)*)", re.M)
_NAME_LINK = re.compile(r"^- \[`(\w+)`\]\[kronvi\.(\w+)\.(\w+)\]", re.M)
_NAMESPACE_LINK = re.compile(r"^- \[`kronvi\.(\w+)`\]\((\w+)\.md\)", re.M)

NAMESPACES = sorted(n for n in kronvi.__all__ if inspect.ismodule(getattr(kronvi, n)))
FRONT_DOOR = sorted(n for n in kronvi.__all__ if n not in NAMESPACES)

# `kronvi.__all__` until this release (177 names): every one still resolves from `kronvi`.
OLD_TOP_LEVEL = """
BNNFit BNNStats ClassifierConfig ClassifierFit ClassifierInfo Compact CompactBasis DensityToleranceError
DirectConfig DirectFit DirectModel DiscretePrior ELRG ELRGFit Eigen EigenFeatureFit EigenFeatureModel Eigenbasis
FeatureFit FeatureFitInfo Features FitInfo FittedClassifier FittedDirect GPFit GPFitInfo GPHyperparameters
GPOptions GaussianFit GaussianMeanField HeldoutScores IntegerSamples LaplaceInfo LogisticFit MeanField Mixture
MixtureFit MixturePrior MixtureSGDInfo MixtureSGDState Prediction RandomFourierFeatures RecipeOptionError
RegressionFit RegressionStats ReinforceInfo ReparamInfo ReparamState Standardizer blr_evidence_noise
blr_log_evidence blr_posterior bnn bnn_elbo bnn_expected_rss bnn_init bnn_stats cavi_sweep check_output_path
compact_features compact_posterior complement_split coordinate_gains cv cv_scores diagonal_sweep
eigen_feature_model eigenbasis eigenbasis_from_inputs elrg_elbo elrg_kl elrg_minibatch_elbo
enable_compilation_cache entropy expected_sparsity feature_elbo feature_learning feature_mean feature_stats
fit_bnn fit_classifier fit_direct fit_elrg fit_features fit_features_eigen fit_gaussian_mf fit_gaussian_reparam
fit_gp_hyperparameters fit_logistic fit_mixture_bound fit_mixture_sgd fit_regression fit_standardizer
fold_indices gaussian gaussian_kl gaussian_mf_elbo gaussian_prior gaussian_reparam_init gaussian_reparam_step
gaussian_start gp_log_marginal_likelihood grid_moments heldout_scores heldout_sq_error integer_error_bound
integer_samples kfold_stats kfold_stats_from_inputs laplace_grid_prior load_csv load_demo load_model load_uci
log_density logistic logistic_elbo_bound logistic_loglik_bound logistic_loglik_estimate
logistic_loglik_minibatch merge_bnn_stats merge_stats minimize_lbfgs mixture_elbo_bound mixture_elbo_estimate
mixture_elbo_unbiased mixture_expected_loglik mixture_from_mean_field mixture_prior_bound mixture_sgd_init
mixture_sgd_step mixtures mlp_features mlp_init noise_moments noise_prior pack_codes pipeline
posterior_grid_prior predict predict_blr predict_bnn predict_elrg predict_features predict_from_codes
predict_gaussian_mf predict_integer predict_logistic predict_mixture predict_regression predictive_log_density
quadratic_net quantize regression_elbo regression_log_joint regression_stats regression_stats_from_chunks
regression_stats_from_inputs reinforce_gradient reinforce_gradient_from_draws reparam_noise_variance
rff_features rff_init rff_lengthscale_features rff_lengthscale_map rotate_features sample_codes
sample_mean_field sample_mixture save_model select_prior spectral_evidence_optimum spectral_log_evidence
standardize subtract_stats unpack_codes write_atomic
""".split()


def _documented(page: pathlib.Path, module: str) -> list[str]:
    """The names of `module` that `page` renders: one `::: module.name` directive each; a directive of the
    module itself must say `members: false` (it renders the module's docstring, not its names)."""
    names = []
    for path, options in _DIRECTIVE.findall(page.read_text()):
        if path == module:
            assert "members: false" in options, f"{page.name}: `::: {module}` without `members: false`"
            continue
        assert path.rpartition(".")[0] == module, f"{page.name} documents {path}, not a name of {module}"
        names.append(path.rpartition(".")[2])
    return names


def test_the_top_level_is_the_front_door():
    assert FRONT_DOOR == sorted([
        "fit_direct", "DirectFit", "FittedDirect", "predict", "Prediction", "log_density", "DensityToleranceError",
        "FitInfo", "DirectConfig", "Eigen", "Compact", "Features", "GPOptions", "RecipeOptionError",
        "fit_classifier", "ClassifierConfig", "ClassifierFit", "FittedClassifier", "save_model", "load_model",
        "DirectModel", "load_demo", "load_csv", "load_uci", "enable_compilation_cache",
    ])  # fmt: skip
    assert NAMESPACES == sorted([
        "inputs", "stats", "model", "fitting", "gaussian", "mixtures", "quantize", "logistic", "bnn",
        "feature_learning", "pipeline", "cv", "files",
    ])  # fmt: skip
    # what a fresh `import kronvi` binds (this process has also imported `kronvi.sklearn` and `kronvi.cli`)
    code = "import json, kronvi; print(json.dumps([n for n in dir(kronvi) if not n.startswith('_')]))"
    public = json.loads(run_python("-c", code, env=dict(os.environ)).strip().splitlines()[-1])
    assert sorted(public) == sorted(kronvi.__all__)


@pytest.mark.parametrize("name", FRONT_DOOR)
def test_every_front_door_name_lives_in_a_namespace(name):
    homes = [ns for ns in NAMESPACES if name in getattr(kronvi, ns).__all__]
    assert len(homes) == 1, homes
    assert getattr(getattr(kronvi, homes[0]), name) is getattr(kronvi, name)


@pytest.mark.parametrize("namespace", [*NAMESPACES, "sklearn"])
def test_each_namespace_page_documents_exactly_its_all(namespace):
    module = importlib.import_module(f"kronvi.{namespace}")
    page = API / f"{namespace}.md"
    documented = _documented(page, module.__name__)
    assert len(documented) == len(set(documented)), f"{page.name} documents a name twice"
    assert sorted(documented) == sorted(module.__all__)
    assert f"`{module.__name__}`" in page.read_text().split("\n\n")[1], f"{page.name}'s intro names its namespace"


def test_every_api_page_is_a_namespace_or_the_front_door():
    pages = sorted(p.stem for p in API.glob("*.md"))
    assert pages == sorted(["index", *NAMESPACES, "sklearn"])


def test_the_front_door_page_lists_exactly_the_top_level():
    text = (API / "index.md").read_text()
    assert _DIRECTIVE.findall(text) == []  # each name is rendered once, on its namespace's page
    names = _NAME_LINK.findall(text)
    assert sorted(n for n, _, _ in names) == FRONT_DOOR
    for name, namespace, target in names:
        assert target == name and name in getattr(kronvi, namespace).__all__, name
    namespaces = _NAMESPACE_LINK.findall(text)
    assert sorted(n for n, _ in namespaces) == NAMESPACES
    assert all(namespace == page for namespace, page in namespaces)


def test_the_module_docstring_names_every_namespace():
    for namespace in NAMESPACES:
        assert f"`kronvi.{namespace}`" in kronvi.__doc__, namespace


def test_the_old_top_level_names_resolve_with_a_warning_to_the_same_object():
    assert len(OLD_TOP_LEVEL) == 177
    moved = 0
    for name in OLD_TOP_LEVEL:
        if name in kronvi.__all__:
            continue
        homes = [ns for ns in NAMESPACES if name in getattr(kronvi, ns).__all__]
        assert len(homes) == 1, (name, homes)
        with pytest.warns(DeprecationWarning, match=rf"^kronvi\.{name} moved to kronvi\.{homes[0]}\.{name} "):
            old = getattr(kronvi, name)
        assert old is getattr(getattr(kronvi, homes[0]), name), name
        moved += 1
    assert moved == 177 - len(FRONT_DOOR) - 8  # the 8 namespaces that were top-level names already


def test_the_old_names_stay_out_of_dir_and_a_wrong_name_is_an_attribute_error():
    assert "cavi_sweep" not in dir(kronvi)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        kronvi.no_such_name  # noqa: B018
    assert not hasattr(kronvi, "BITS")  # a namespace's name that was never top-level stays there only
