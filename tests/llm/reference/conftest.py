"""These tests compare against transformers' GGUF loader (transformers + accelerate + torch, minutes to install), so
they are collected only in `nox -s llm_reference`, which sets TINYCORE_LLM_REFERENCE=1."""
import os

collect_ignore_glob = [] if os.environ.get("TINYCORE_LLM_REFERENCE") == "1" else ["test_*.py"]
