"""``obsmem encoder build``: build (or verify) the configured ONNX encoder now rather than on first use.

Register it in the CLI's command table with one line::

    "encoder": "obsmem.surfaces.cli_encoder:encoder",

The ONNX build of the local model (int8 or fp32) is made from the installed weights once and cached (see
docs/semantic.md, "The local encoder"); the first search or indexing run builds it otherwise. This
command does it ahead of time, for instance while installing, and says where the cache entry is.
"""

from __future__ import annotations

from typing import Any

import click

from obsmem.errors import ValidationFailed
from obsmem.json_shape import strict_dumps


@click.group("encoder")
def encoder() -> None:
    """The fast local encoder (the ONNX build of the local embedding model)."""


@encoder.command("build")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_obj
def build(app: Any, as_json: bool) -> None:
    """Build the fast local encoder from the installed model, or verify the one already built.

    Needs [semantic] with the local provider and an ONNX or OpenVINO encoder ("onnx-fp32", "onnx-int8" or
    "openvino-bf16"). Nothing is downloaded: the model is exported from the weights on this machine. Safe to
    run while a server runs.
    """
    from obsmem.indexer import local_encoder

    settings = app.settings()
    if settings.semantic is None or settings.semantic.embedding.provider != "local":
        raise ValidationFailed(
            "the fast encoder is for the local embedding model: the settings have no [semantic] section "
            "with provider 'local'",
            code="mode_unavailable",
        )
    if settings.semantic.embedding.encoder == "torch-fp32":
        raise ValidationFailed(
            "semantic.embedding.encoder is 'torch-fp32', which needs no build; the ONNX and OpenVINO encoders do",
            code="mode_unavailable",
        )
    built = local_encoder(settings.semantic.embedding)
    summary = {
        "directory": str(built.directory),
        "weights_sha256": built.weights_sha256,
        "built": built.built,
        "build_seconds": built.build_seconds,
    }
    if as_json:
        click.echo(strict_dumps(summary, indent=2, sort_keys=True))
    else:
        verb = f"built in {built.build_seconds:.1f} s" if built.built else "already built and verified"
        click.echo(f"fast local encoder {verb}: {built.directory}")
