"""The GPU check: one command that installs what was carried in, builds the synthetic full-size checkpoint, serves it
through Triton and the shim on the GPU, runs the acceptance kit, measures predict() in-process, and writes one
report folder. ``--cpu`` rehearses the same steps on the CPU with the tiny fixture (see docs/gpu-check.md).

The orchestrating modules use the standard library only: on the GPU machine they run before anything is installed.
The scripts that import torch (environment, fit, inprocess, warm_kernels) run in their own processes.

Module map, in the order a run meets them:

* Before the machine: ``collect`` gathers the carry (layout in ``carry``: wheels, the trimmed server, fla, and the
  ``libpython`` fallback); ``rehearse`` plays the whole run offline on a CPU machine shaped like the GPU machine's.
* On the machine: ``on_device.sh`` prints what decides the run, then ``preflight`` stops it by name when libpython or
  the disk is missing; ``__main__`` parses the options and calls the runner.
* The runner: ``check`` runs the steps in order, records what each returns (``findings``: Found and Findings) into
  the ``context``, and tears down; ``budgets`` gives each step its allowance and decides what gives way when time is
  short; ``deadline`` holds the overall deadline and the subprocesses that cannot outlive it; ``report``, ``summary``
  and ``archive`` write report.json, report.md and the archive after every step; ``diagnosis`` leaves, for a step that
  did not pass, its log tails, its environment and the ``--only`` command that re-runs it.
* The steps (``steps``, by phase: ``machine``, ``model``, ``baseline``, ``served``), each with its helpers: the
  machine (``environment``), the service's environment (``install``, ``shadowed``: what numpy 2 packages to hide),
  the python backend stub and its libraries (``stub``, ``libpython``, ``libraries``: which CUDA libraries the stub
  and the in-process run loaded), the checkpoint (``checkpoint_code``), the request shapes (``shapes``, ``fit``),
  the kernel warm-up (``warm_kernels``, and ``kernel_lengths``: which lengths, by fla's autotuning buckets), the
  in-process figures (``inprocess``, ``stats``), the VRAM caps (``cap``), the served stack (``stack``), the
  service's timings (``service``) and the acceptance kit (``acceptance_kit``).
"""
