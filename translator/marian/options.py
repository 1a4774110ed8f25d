"""Marian's options (`special:model.yml`) -> our `TransformerConfig`, or every reason not.

`architecture` names each unsupported option at once, before anything is built or
written: what CTranslate2's own converter accepts (its `OpusMTConverter` is the
reference the tests compare with), which is what Marian's transformer models use.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from translator.marian.files import MarianFiles, MarianImportError

# Marian's `--transformer-ffn-activation` -> ours ("gelu" is Marian's sigmoid form).
ACTIVATIONS = {"relu": "relu", "swish": "swish", "gelu": "gelu_sigmoid"}
# `--transformer-postprocess-emb`: d = dropout, n = LayerNorm.
EMBEDDING_POSTPROCESS = ("", "d", "n", "nd")
# (preprocess, postprocess, postprocess-top) of the two block layouts: ours as norm_first.
NORM_LAYOUTS = {("", "dan", ""): False, ("n", "da", "n"): True}
# Options that change the network and must keep Marian's defaults here.
DEFAULTS = {
    "type": "transformer",
    "transformer-decoder-autoreg": "self-attention",
    "transformer-no-projection": False,
    "transformer-ffn-depth": 2,
    "transformer-tied-layers": [],
    "right-left": False,
    "lemma-dim-emb": 0,
}


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What the import builds: the config's fields and how the embeddings are tied."""

    # `TransformerConfig` fields but the vocabulary sizes (the id mapping gives those).
    fields: dict[str, Any]
    # How the embeddings are shared: "all" (source, target, output), "target" (target and
    # output), "source" (source and target; Marian's --tied-embeddings-src) or "none".
    tied: str

    def describe(self) -> str:
        """One line for the import's report."""
        f = self.fields
        norm = "pre-norm" if f["norm_first"] else "post-norm"
        return (
            f"{f['num_encoder_layers']}+{f['num_decoder_layers']} layers, d_model "
            f"{f['d_model']}, {f['num_heads']} heads, FFN {f['ffn_dim']} "
            f"{ {'gelu_sigmoid': 'gelu'}.get(f['activation'], f['activation']) }, {norm}, "
            f"{'embedding LayerNorm, ' if f['embedding_norm'] else ''}"
            f"{f['position_encoding']} positions, embeddings tied: {self.tied}"
        )


def architecture(files: MarianFiles) -> Architecture:
    """Our architecture for a Marian model.

    Raises:
        MarianImportError: naming every unsupported option and unknown parameter.
    """
    options, params = files.options, files.params
    problems = _unsupported_options(options)
    tied = _tied(options, params, problems)
    positions = _positions(options, params, problems)
    unknown = sorted(set(params) - _expected_params(options, params))
    if unknown:
        shown = ", ".join(unknown[:8]) + (
            f" and {len(unknown) - 8} more" if len(unknown) > 8 else ""
        )
        problems.append(f"parameters this import does not know: {shown}")
    if problems:
        raise MarianImportError(
            f"{files.origin}: cannot import this Marian model: " + "; ".join(problems)
        )
    return Architecture(fields=_fields(options, tied, positions), tied=tied)


def _unsupported_options(options: dict) -> list[str]:
    """Each option whose value this import cannot reproduce, with what it supports."""
    problems = []
    for key, default in DEFAULTS.items():
        value = options.get(key, default)
        if value != default and not (default == [] and not value):
            problems.append(f"--{key} {value!r} (supported: {default!r})")
    activation = options.get("transformer-ffn-activation", "swish")
    if activation not in ACTIVATIONS:
        problems.append(
            f"--transformer-ffn-activation {activation!r} (supported: relu, swish, gelu)"
        )
    emb = options.get("transformer-postprocess-emb", "d")
    if emb not in EMBEDDING_POSTPROCESS:
        problems.append(f"--transformer-postprocess-emb {emb!r} (supported: '', d, n, nd)")
    if _norm_layout(options) not in NORM_LAYOUTS:
        problems.append(
            f"--transformer-preprocess/-postprocess/-postprocess-top {_norm_layout(options)} "
            "(supported: ('', 'dan', '') post-norm, ('n', 'da', 'n') pre-norm)"
        )
    ffn = options.get("transformer-dim-ffn", 2048)
    decoder_ffn = options.get("transformer-decoder-dim-ffn", 0) or ffn
    if decoder_ffn != ffn:
        problems.append(
            f"--transformer-decoder-dim-ffn {decoder_ffn} != --transformer-dim-ffn {ffn}"
        )
    decoder_depth = options.get("transformer-decoder-ffn-depth", 0) or 2
    if decoder_depth != 2:
        problems.append(f"--transformer-decoder-ffn-depth {decoder_depth} (supported: 2)")
    if not options.get("huggingface", {}).get("scale_embedding", True):
        problems.append("scale_embedding false (MarianMT scales embeddings by sqrt(d_model))")
    return problems


def _norm_layout(options: dict) -> tuple[str, ...]:
    """Where Marian normalizes: its pre-, post- and top-postprocess strings."""
    return tuple(
        str(options.get(key, default) or "")
        for key, default in (
            ("transformer-preprocess", ""),
            ("transformer-postprocess", "dan"),
            ("transformer-postprocess-top", ""),
        )
    )


def _fields(options: dict, tied: str, positions: dict) -> dict:
    """The `TransformerConfig` fields of a supported Marian model."""
    return dict(
        num_encoder_layers=int(options["enc-depth"]),
        num_decoder_layers=int(options["dec-depth"]),
        d_model=int(options.get("dim-emb", 512)),
        num_heads=int(options["transformer-heads"]),
        ffn_dim=int(options.get("transformer-dim-ffn", 2048)),
        activation=ACTIVATIONS[options.get("transformer-ffn-activation", "swish")],
        norm_first=NORM_LAYOUTS[_norm_layout(options)],
        embedding_norm="n" in options.get("transformer-postprocess-emb", "d"),
        **positions,
        share_embeddings=tied in ("all", "source"),
        tie_output_projection=tied in ("all", "target"),
        output_bias=True,  # Marian's, which also masks the ids it cannot produce
        zero_start_embedding=True,  # the decoder starts from zeros, fine-tuned or not
        # Marian's dropout options are training settings, not architecture.
        dropout=float(options.get("transformer-dropout", 0.1) or 0.0),
        attention_dropout=float(options.get("transformer-dropout-attention", 0.0) or 0.0),
        activation_dropout=float(options.get("transformer-dropout-ffn", 0.0) or 0.0),
    )


def _tied(options: dict, params: dict, problems: list[str]) -> str:
    untied = any(f"decoder_ff_logit_out_{w}" in params for w in ("W", "Wt"))
    if "Wemb" in params:
        return "source" if untied else "all"
    if "encoder_Wemb" not in params or "decoder_Wemb" not in params:
        problems.append("no embeddings (Wemb, or encoder_Wemb and decoder_Wemb)")
        return "none"
    return "none" if untied else "target"


def _positions(options: dict, params: dict, problems: list[str]) -> dict[str, Any]:
    tables = [params.get(name) for name in ("encoder_Wpos", "decoder_Wpos", "Wpos")]
    learned = [table for table in tables if table is not None]
    if not learned:
        if options.get("transformer-train-position-embeddings"):
            problems.append("--transformer-train-position-embeddings but no Wpos parameter")
        return {"position_encoding": "sinusoidal", "sinusoid_layout": "marian"}
    if len({table.shape for table in learned}) > 1:
        problems.append("position tables of different shapes")
    return {"position_encoding": "learned", "max_length": int(learned[0].shape[0])}


def _expected_params(options: dict, params: dict) -> set[str]:
    """Every parameter name the weights mapping reads (the rest are unknown)."""
    names = {"Wemb", "encoder_Wemb", "decoder_Wemb", "Wpos", "encoder_Wpos", "decoder_Wpos"}
    names |= {f"decoder_ff_logit_out_{w}" for w in ("W", "Wt", "b")}
    norms = ("ln_scale", "ln_bias", "ln_scale_pre", "ln_bias_pre")
    for side in ("encoder", "decoder"):
        names |= {f"{side}_emb_{n}" for n in norms} | {f"{side}_top_{n}" for n in norms}
        depth = int(options.get("enc-depth" if side == "encoder" else "dec-depth", 0))
        for i in range(1, depth + 1):
            scopes = ["self"] + (["context"] if side == "decoder" else [])
            for scope in scopes:
                prefix = f"{side}_l{i}_{scope}"
                for p in "qkvo":
                    names |= {f"{prefix}_W{p}", f"{prefix}_Wt{p}", f"{prefix}_b{p}"}
                names |= {f"{prefix}_Wo_{n}" for n in norms}
            prefix = f"{side}_l{i}_ffn"
            names |= {f"{prefix}_{w}{k}" for w in ("W", "Wt", "b") for k in "12"}
            names |= {f"{prefix}_ffn_{n}" for n in norms}
    return names
