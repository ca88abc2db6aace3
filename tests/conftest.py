import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_VERSION_DIR = REPO_ROOT / "model_repository" / "intern_decision" / "1"

# The model side is loaded by Triton from its version folder; the tests import it from there too.
if str(MODEL_VERSION_DIR) not in sys.path:
    sys.path.insert(0, str(MODEL_VERSION_DIR))
