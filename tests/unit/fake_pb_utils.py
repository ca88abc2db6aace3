"""A fake pb_utils whose metrics record their values and the threads that set them, and facts to publish."""
import threading

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
