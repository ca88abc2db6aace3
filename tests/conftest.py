from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_VERSION_DIR = REPO_ROOT / "model_repository" / "intern_decision" / "1"
