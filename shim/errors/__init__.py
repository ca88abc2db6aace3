"""Every error the shim answers, in one place: what each code is, how it is raised, classified and written.

codes       every public error code, defined once (the registry)                                        (pure)
raised      the exceptions the app raises to answer one: ApiError, UnprocessableRequest (422)           (pure)
failures    the one failure type of a model call, and why the model is unusable (Problem)               (pure)
envelope    the envelope, built once in the answering surface's shape                                   (pure)
answer      the one writer of an error's answer: the edge's, the handlers', MCP's and the server's
openapi     the OpenAPI document as served: the committed one with the registry's error codes           (pure)
handlers    Starlette's exception handlers
"""
from .codes import PublicError
from .envelope import envelope, validation_detail
from .failures import (MODEL_FACTS_UNAVAILABLE, MODEL_NOT_ANSWERING, MODEL_NOT_READY, MODEL_UNAVAILABLE,
                       OUT_OF_MEMORY_WORDS, TRITON_ERROR, TRITON_NOT_READY, TRITON_UNREACHABLE, Failure,
                       IncompleteAnswer, ModelFailure, Problem, from_triton, model_unavailable, unreachable)
from .raised import ApiError, UnprocessableRequest

__all__ = ["MODEL_FACTS_UNAVAILABLE", "MODEL_NOT_ANSWERING", "MODEL_NOT_READY", "MODEL_UNAVAILABLE",
           "OUT_OF_MEMORY_WORDS", "TRITON_ERROR", "TRITON_NOT_READY", "TRITON_UNREACHABLE", "ApiError", "Failure",
           "IncompleteAnswer", "ModelFailure", "Problem", "PublicError", "UnprocessableRequest", "envelope",
           "from_triton", "model_unavailable", "unreachable", "validation_detail"]
