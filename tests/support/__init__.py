"""What the tests share besides the fixtures of conftest.py; each module is named for what it provides.

- ``crash_writer``: a process that ingests forever and acknowledges each commit (killed by the crash tests).
- ``eval_datasets``: small LoCoMo, LongMemEval and labelled-question files for the eval harness tests, and
  the reranker calibration's memories and questions.
- ``http_server``: API keys, seeded notes, settings with keys, and ``live_server`` (the real HTTP server
  as a process on a free loopback port).
- ``hybrid_reference``: hybrid search recomputed by brute force from the canonical memories alone.
- ``index_worker``: a process that runs the indexer for one project (killed by the crash tests).
- ``model_server``: OpenAI-compatible embedding and rerank servers on 127.0.0.1 (hashed bags of words).
- ``pipeline_service``: services whose pipeline talks to the scripted chat server, and test events.
- ``processes``: how a support module runs as its own process (``python -m support.NAME``).
- ``scripted_chat``: the scripted OpenAI-compatible chat server and the scripts that play the Observer,
  Reflector and Dropper.
- ``semantic_service``: services in semantic mode on the loopback model server, and memories to index
  (``corpus``).
- ``storage_faults``: real storage faults (a full tmpfs, a read-only mount, an SQLite VFS that fails I/O).
"""
