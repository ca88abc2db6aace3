"""Every error the shim answers, in one place: what each code is, how it is raised, classified and written.

codes       every public error code, defined once: status, code, fixed words, TypeSafe's error type, Retry-After
            and closing (the registry)                                                                    (pure)
raised      the exceptions the app raises to answer one: ApiError, and UnprocessableRequest (422)           (pure)
failures    the one failure type of a call to the model (Failure, on wire.Kind) and why the model is unusable
            (Problem: public words and private detail, both set where it arises)                           (pure)
envelope    the envelope, built once in the answering surface's shape (TypeSafe's detail on System One's) (pure)
answer      the one writer of an error's answer: the edge's refusals, the handlers', MCP's and the server's own
handlers    Starlette's exception handlers: what the app raises and what the port tells, answered
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
