"""Run the indexer for one project in its own process (test_semantic_crash.py kills it with SIGKILL).

python -m support.index_worker DATA_DIR BASE_URL [BATCH_CHUNKS]   (see support.processes)
"""

from __future__ import annotations

import sys

from obsmem import Obsmem
from obsmem.settings import load_settings


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
