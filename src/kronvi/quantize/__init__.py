"""Quantized posterior samples: sampling, 4-bit packing, integer-arithmetic prediction, model files."""

from ._codes import BITS as BITS
from ._codes import IntegerSamples as IntegerSamples
from ._codes import integer_error_bound as integer_error_bound
from ._codes import integer_samples as integer_samples
from ._codes import pack_codes as pack_codes
from ._codes import predict_from_codes as predict_from_codes
from ._codes import predict_integer as predict_integer
from ._codes import sample_codes as sample_codes
from ._codes import unpack_codes as unpack_codes
from ._io import DirectModel as DirectModel
from ._io import load_model as load_model
from ._io import save_model as save_model

__all__ = [
    "BITS",
    "DirectModel",
    "IntegerSamples",
    "integer_error_bound",
    "integer_samples",
    "load_model",
    "pack_codes",
    "predict_from_codes",
    "predict_integer",
    "sample_codes",
    "save_model",
    "unpack_codes",
]
