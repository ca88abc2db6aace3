"""Which linear-attention kernels the model runs, read from what transformers resolved (its real modelling module)."""


from intern_decision_model.kernels import KernelFacts, implementation_of, package_version, slow_path_refusal


def test_transformers_on_this_machine_resolved_its_reference_kernels():
    import transformers.models.qwen3_5.modeling_qwen3_5 as modeling

    # neither flash-linear-attention nor causal-conv1d is installed on CPU machines
    assert implementation_of(modeling.causal_conv1d_fn) == "reference"
    assert implementation_of(modeling.torch_chunk_gated_delta_rule) == "reference"
    assert package_version("fla") == "" and package_version("causal_conv1d") == ""


def test_a_function_without_a_recorded_choice_is_unknown():
    assert implementation_of(len) == "unknown"
    assert implementation_of(lambda: None) == "unknown"


def test_only_cuda_without_the_fast_path_is_refused_and_only_without_the_opt_in():
    slow = KernelFacts("", "", "reference")
    assert "INTERN_DECISION_ALLOW_SLOW_KERNELS=1" in slow_path_refusal(slow, "cuda:0", allowed=False)
    assert slow_path_refusal(slow, "cuda:0", allowed=True) is None
    assert slow_path_refusal(slow, "cpu", allowed=False) is None
    assert slow_path_refusal(KernelFacts("0.5.2", "1.7.0", "fast"), "cuda:0", allowed=False) is None
    assert slow_path_refusal(KernelFacts("0.5.2", "", "mixed"), "cuda:0", allowed=False) is not None
    assert slow_path_refusal(KernelFacts("", "", "unknown"), "cuda:0", allowed=False) is not None


def test_a_package_that_fails_to_import_counts_as_missing(monkeypatch):
    import importlib

    def broken(name):
        raise OSError("undefined symbol: _ZN3c10")

    monkeypatch.setattr(importlib, "import_module", broken)
    assert package_version("fla") == ""
