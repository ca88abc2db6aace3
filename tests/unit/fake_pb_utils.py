"""A fake pb_utils whose metrics record their values and the threads that set them, facts to publish, and the
tensors, responses and errors model.py answers with."""
import threading

import numpy as np

from wire.facts import ModelFacts

FACTS = ModelFacts(name="Fake-Decision", repo="internlm/Intern-Decision-4B", revision="f" * 40,
                   inference_sha256="e" * 64, prompt_version="inference.py@sha256:eeeeeeeeeeeeeeee", dtype="bfloat16",
                   device="cuda:0", vram_cap_gib=None, max_tokens=8192, vision_tower="removed", fla_version="0.5.2",
                   causal_conv1d_version="1.7.0", linear_attention="fast", slow_kernels_allowed=False,
                   pinned=True, boot_id="b" * 32, started_at="2026-05-04T10:11:12.345+00:00")


class FakeMetric:
    def __init__(self, family, labels, buckets=None):
        self.family, self.labels, self.value, self.observed = family, labels, 0, []
        self.threads = set()

    def increment(self, value):
        self.threads.add(threading.current_thread().name)
        self.value += value

    def set(self, value):
        self.threads.add(threading.current_thread().name)
        self.value = value

    def observe(self, value):
        self.threads.add(threading.current_thread().name)
        self.observed.append(value)


class FakePbUtils:
    def __init__(self):
        self.metrics = []
        pb = self

        class MetricFamily:
            COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

            def __init__(self, name, description, kind):
                self.name = name

            def Metric(self, labels, buckets=None):  # noqa: N802 (pb_utils' name)
                metric = FakeMetric(self.name, labels, buckets)
                pb.metrics.append(metric)
                return metric

        self.MetricFamily = MetricFamily

    def find(self, family, **labels):
        return next(m for m in self.metrics if m.family == family and all(m.labels.get(k) == v
                                                                          for k, v in labels.items()))


class FakeTensor:
    def __init__(self, name, array):
        self._name, self._array = name, array

    def name(self):
        return self._name

    def as_numpy(self):
        return self._array


class FakeInferenceRequest:
    def __init__(self, tensors: dict, request_id: str = "r", parameters: str = "{}"):
        self.tensors = {name: FakeTensor(name, np.array(values, dtype=np.object_)) for name, values in tensors.items()}
        self._request_id, self._parameters = request_id, parameters

    def request_id(self):
        return self._request_id

    def parameters(self):
        return self._parameters


class FakeBackendUtils(FakePbUtils):
    """Enough of pb_utils for model.py's initialize, execute and finalize; Logger keeps the lines."""

    Tensor = FakeTensor

    def __init__(self):
        super().__init__()
        lines = self.lines = []

        class InferenceResponse:
            def __init__(self, output_tensors, error=None):
                self.output_tensors, self.error = output_tensors, error

        class TritonError:
            INVALID_ARG, UNAVAILABLE, INTERNAL = "INVALID_ARG", "UNAVAILABLE", "INTERNAL"

            def __init__(self, message, code=None):
                self.message, self.code = message, code

        class Logger:
            log_info = log_warn = log_error = staticmethod(lines.append)

        self.InferenceResponse, self.TritonError, self.Logger = InferenceResponse, TritonError, Logger

    @staticmethod
    def get_input_tensor_by_name(request, name):
        return request.tensors.get(name)
