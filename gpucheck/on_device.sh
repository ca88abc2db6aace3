#!/usr/bin/env bash
# The GPU check as it runs on the GPU machine, from the repository root with .carry/ beside it:
#
#   bash gpucheck/on_device.sh OUT [gpucheck options]
#
# It prints what decides whether the check can work there (the machine's scipy and scikit-learn, which need
# numpy 2; the card; where libpython 3.12 is, or that the carried one will be used, and the free disk, stopping by
# name when libpython is missing with none carried or the disk is short), then runs
# `python3 -m gpucheck --out OUT`, which leaves at most
# three files in OUT: report.md, report.json and gpucheck-files.tar.gz (every log and measurement). The rehearsal
# (python -m gpucheck.rehearse) runs this same script, with `--device cpu --checkpoint synthetic-small`.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash gpucheck/on_device.sh OUT [gpucheck options]}
shift

echo "== python3: $(command -v python3) ($(python3 --version 2>&1))"
python3 -m pip show scipy scikit-learn numpy 2>/dev/null | grep -E '^(Name|Version|Location):'
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader
else
  echo "== nvidia-smi: not on PATH"
fi
echo "== .carry: $(du -sh .carry 2>/dev/null | cut -f1 || echo missing)"
# where libpython is and the free disk; stops here, by name and with a report in OUT, when either is missing
# (exit 3: the machine's own limit, named; 1: anything else)
python3 -m gpucheck.preflight --out "$out" "$@"
preflight=$?
if [ "$preflight" -ne 0 ]; then
  ls -la "$out"
  exit "$preflight"
fi
# where the loader's cache resolves the CUDA libraries a system folder could hold (the report compares what the
# stub and the in-process run actually loaded)
{ /sbin/ldconfig -p 2>/dev/null || ldconfig -p 2>/dev/null; } | grep -E 'lib(nccl|cudnn|cudart|cublas|python3)[^ ]*\.so' \
  | sed 's/^/== loader cache: /' || true

python3 -m gpucheck --out "$out" "$@"
status=$?
ls -la "$out"
exit $status
