"""Run the indexer for one project in its own process (the crash tests kill it with SIGKILL).

python semantic_worker.py DATA_DIR BASE_URL [BATCH_CHUNKS]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from obsmem import Obsmem  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402


def main() -> None:
    data_dir, base_url = sys.argv[1], sys.argv[2]
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    semantic = {
        "embedding": {
            "provider": "openai",
            "base_url": base_url,
            "model_id": "hashed-words",
            "timeout_seconds": 5,
        },
        "index": {
            "background": False,
            "publish_min_changes": 1,
            "batch_chunks": batch,
            "hnsw_ef_construction": 100,
        },
    }
    with Obsmem(load_settings(data_dir=data_dir, semantic=semantic)) as service:
        service.index("p")


if __name__ == "__main__":
    main()
