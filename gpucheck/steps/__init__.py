"""The check's steps, each a function of the context that returns a Found: its one-line detail, what it measured
(its report entry's data) and what it found for the steps after it (gpucheck.findings). A step raises Skip or
Inconclusive (with its data), or any error; what it measured before an error travels with it (context.keeping).
Steps read what earlier steps found (ctx.findings) and never write it, nor their report entry: gpucheck.check
records both. They hand the runner its resources (the served stack, the kernel warm-up) through the context's
methods. gpucheck.check runs them in order under their allowances.

By phase: ``machine`` (environment, install, stub), ``model`` (checkpoint, shapes, kernel_warmup), ``baseline``
(inprocess, inprocess_torch, inprocess_mixed, inprocess_shared, graphs) and ``served`` (server, service, acceptance,
overcap)."""
from gpucheck.steps.baseline import (
    graphs_step,
    inprocess_mixed_step,
    inprocess_shared_step,
    inprocess_step,
    inprocess_torch_step,
)
from gpucheck.steps.machine import environment_step, install_step, stub_step
from gpucheck.steps.model import checkpoint_step, kernel_warmup_step, shapes_step
from gpucheck.steps.served import acceptance_step, overcap_step, server_step, service_step, serving_choice

__all__ = ["acceptance_step", "checkpoint_step", "environment_step", "graphs_step", "inprocess_mixed_step",
           "inprocess_shared_step", "inprocess_step", "inprocess_torch_step",
           "install_step", "kernel_warmup_step", "overcap_step", "server_step", "service_step", "serving_choice",
           "shapes_step", "stub_step"]
