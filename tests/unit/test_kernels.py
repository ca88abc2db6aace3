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


def test_the_report_without_a_model_reads_what_transformers_bound():
    from intern_decision_model import kernels

    probe = kernels.report()
    assert probe["packages"] == {"fla": "", "causal_conv1d": ""}
    assert set(probe["functions"]) == set(kernels.KERNEL_FUNCTIONS)
    for entry in probe["functions"].values():
        assert entry["path"] == "reference" and entry["bound"].startswith("transformers.")
    assert probe["linear_attention"] == kernels.qwen3_5_path() == "reference"


def test_paths_combine_to_one_word():
    from intern_decision_model.kernels import combine

    assert combine(["fast", "fast"]) == "fast"
    assert combine(["fast", "reference"]) == "mixed"
    assert combine(["fast", "unknown"]) == "unknown"
    assert combine([]) == "unknown"


def test_a_bound_kernel_is_found_through_wrappers():
    import functools

    from intern_decision_model.kernels import bound_module, implementation_of

    def fast_kernel():
        return "fast"

    def reference():
        return "reference"

    def choose(implementation, is_new_implementation):
        """transformers' shape: the choice kept in the closure of the function the layers call."""
        @functools.wraps(reference)
        def wrapped():
            return implementation() if is_new_implementation else reference()
        return wrapped

    chosen = choose(fast_kernel, True)

    @functools.wraps(chosen)
    def hub_wrapper():  # a further decorator on top, as transformers' hub-kernel wrapper can be
        return chosen()

    assert implementation_of(chosen) == "fast" and bound_module(chosen) == __name__
    assert implementation_of(hub_wrapper) == "fast" and bound_module(hub_wrapper) == __name__
    assert implementation_of(choose(reference, False)) == "reference"


def test_the_model_the_gpu_check_and_the_image_smoke_check_share_the_probe():
    from gpucheck import inprocess
    from intern_decision_model import kernels
    from tests.unit.deploy_files import REPO, load_script

    assert inprocess.kernels is kernels
    smoke = load_script("docker/triton/smoke_check.py")
    fast = {"packages": {"fla": "0.5.2", "causal_conv1d": "1.7.0"}, "linear_attention": "fast",
            "functions": {name: {"path": "fast", "bound": "x"} for name in kernels.KERNEL_FUNCTIONS}}
    assert smoke.kernel_problems(fast, None) == []
    mixed = {**fast, "linear_attention": "mixed",
             "functions": {**fast["functions"], "causal_conv1d_fn": {"path": "reference", "bound": "transformers.m"}}}
    problems = smoke.kernel_problems(mixed, "ImportError: no causal_conv1d_cuda")
    assert problems == ["causal_conv1d_fn resolves to the reference path (transformers.m)",
                        "the linear-attention path is mixed, not fast",
                        "the causal_conv1d_cuda extension does not load: ImportError: no causal_conv1d_cuda"]
    assert "intern_decision_model import kernels" in (REPO / "docker/triton/smoke_check.py").read_text()
