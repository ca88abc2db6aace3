"""Running the stack on a CPU machine: the bundled tritonserver, the fixture checkpoint, the shim.

This is development and test tooling. Production runs the Triton container on the GPU host (docker/).
"""
