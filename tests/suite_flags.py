"""XLA flags that make the suite's many small programs compile faster. ``conftest.py`` sets them before JAX
starts its backend, so this module imports nothing; ``helpers.subprocess_env`` can leave them out.

They change the generated code, not what it asks XLA to compute, but may round differently; users run
XLA's defaults, and ``KRONVI_TEST_FULL_OPT=1`` runs the suite that way."""

SUITE_XLA_FLAGS = (
    # LLVM's cheap passes: about a quarter of the CPU time of compile-bound modules
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
    # XLA's older CPU fusion emitters (elemental IR, not the MLIR emitters): the fits' programs compile in
    # about half the time again (docs/decisions/compilation.md#the-suites-xla-flags-and-a-full-optimization-run)
    "--xla_cpu_use_fusion_emitters=false",
)
