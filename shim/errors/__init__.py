"""Every error the shim answers: what each code is, how it is raised, classified and written."""
from .codes import PublicError
from .envelope import envelope, validation_detail
from .failures import (
    MODEL_FACTS_UNAVAILABLE,
    MODEL_NOT_ANSWERING,
    MODEL_NOT_READY,
    MODEL_UNAVAILABLE,
    OUT_OF_MEMORY_WORDS,
    TRITON_ERROR,
    TRITON_NOT_READY,
    TRITON_UNREACHABLE,
    Failure,
    IncompleteAnswer,
    ModelFailure,
    Problem,
    from_triton,
    model_unavailable,
    unreachable,
)
from .raised import ApiError, UnprocessableRequest

__all__ = ["MODEL_FACTS_UNAVAILABLE", "MODEL_NOT_ANSWERING", "MODEL_NOT_READY", "MODEL_UNAVAILABLE",
           "OUT_OF_MEMORY_WORDS", "TRITON_ERROR", "TRITON_NOT_READY", "TRITON_UNREACHABLE", "ApiError", "Failure",
           "IncompleteAnswer", "ModelFailure", "Problem", "PublicError", "UnprocessableRequest", "envelope",
           "from_triton", "model_unavailable", "unreachable", "validation_detail"]
