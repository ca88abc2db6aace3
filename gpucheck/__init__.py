"""The GPU check: one command that installs what was carried in, builds the synthetic full-size checkpoint, serves it
through Triton and the shim on the GPU, runs the acceptance kit, measures predict() in-process, and writes one
report folder. ``--cpu`` rehearses the same steps on the CPU with the tiny fixture (see docs/gpu-check.md).

The orchestrating modules use the standard library only: on the GPU machine they run before anything is installed.
The scripts that import torch (environment, fit, inprocess) run in their own processes.
"""
