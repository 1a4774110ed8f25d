"""Small Marian models written here, as Marian and OPUS-MT lay them out, with random weights.

Parameter names, shapes and `special:model.yml` follow Marian's transformer; the
vocabulary is a `.yml` in Marian's order (`</s>` 0, `<unk>` 1, then pieces in an order of
its own, as Marian's frequency order is); the SentencePiece models have SentencePiece's
default ids (unk 0, bos 1, eos 2, no pad), as OPUS-MT's do. CTranslate2's converter reads
the same files: it is the oracle the import is compared with.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from unittest import mock

import numpy as np
import yaml

D_MODEL, HEADS, FFN, DEPTH = 32, 4, 64, 2


@dataclasses.dataclass(frozen=True)
class Variant:
    """One Marian architecture to build."""

    name: str
    pre_norm: bool = False
    activation: str = "swish"  # relu | swish | gelu
    tied: str = "all"  # all (Wemb) | target (decoder_Wemb = output) | source (Wemb) | none
    vocabularies: int = 1  # one shared .yml, or one per side
    embedding_norm: bool = False  # --transformer-postprocess-emb n
    learned_positions: bool = False
    language_tokens: tuple[str, ...] = ()
    # SentencePiece pieces left out of Marian's vocabulary (it reads them as <unk>).
    dropped_pieces: int = 0
    # The random weights' seed, and what `</s>`'s output bias gets on top of the others':
    # a random model's beams end at once or never, but for some seeds and biases; these
    # end at least 10 of the 40 test sentences' beams after 3 pieces or more in
    # CTranslate2's beam 4 (tests/marian/test_import.py compares those).
    seed: int = 0
    eos_bias: float = 4.0


VARIANTS = (
    Variant("postnorm-swish-tied-all", seed=2, eos_bias=5.0),
    Variant(
        "prenorm-relu-tied-target",
        pre_norm=True,
        activation="relu",
        tied="target",
        seed=3,
        eos_bias=6.0,
    ),
    Variant("postnorm-gelu-untied-two-vocabs", activation="gelu", tied="none", vocabularies=2),
    Variant(
        "prenorm-swish-embnorm-multilingual",
        pre_norm=True,
        embedding_norm=True,
        language_tokens=(">>deu<<", ">>fra<<"),
        dropped_pieces=7,
    ),
    Variant("postnorm-relu-learned-positions", activation="relu", learned_positions=True, seed=1),
    Variant("prenorm-swish-tied-source", pre_norm=True, tied="source", seed=1),
)


def sentencepiece_pieces(model: bytes) -> list[str]:
    """A SentencePiece model's ordinary pieces (not unk, bos, eos), in id order."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=model)
    return [
        processor.id_to_piece(i)
        for i in range(processor.get_piece_size())
        if not (processor.is_control(i) or processor.is_unknown(i))
    ]


def _vocabulary(pieces: list[str], variant: Variant, rng) -> list[str]:
    pieces = list(dict.fromkeys(pieces))
    order = rng.permutation(len(pieces))  # Marian's order is not SentencePiece's
    kept = [pieces[i] for i in order][variant.dropped_pieces :]
    return ["</s>", "<unk>", *variant.language_tokens, *kept]


def _write_vocabulary(path: Path, pieces: list[str]) -> None:
    # Marian's own writer emits one `piece: id` per line; YAML's emitter quotes as needed.
    path.write_text(
        yaml.safe_dump(
            {piece: i for i, piece in enumerate(pieces)}, allow_unicode=True, sort_keys=False
        ),
        "utf-8",
    )


def _options(variant: Variant, vocab_sizes: list[int]) -> dict:
    return {
        "type": "transformer",
        "dim-emb": D_MODEL,
        "dim-vocabs": vocab_sizes,
        "enc-depth": DEPTH,
        "dec-depth": DEPTH,
        "transformer-heads": HEADS,
        "transformer-dim-ffn": FFN,
        "transformer-ffn-depth": 2,
        "transformer-ffn-activation": variant.activation,
        "transformer-preprocess": "n" if variant.pre_norm else "",
        "transformer-postprocess": "da" if variant.pre_norm else "dan",
        "transformer-postprocess-top": "n" if variant.pre_norm else "",
        "transformer-postprocess-emb": "nd" if variant.embedding_norm else "d",
        "transformer-decoder-autoreg": "self-attention",
        "transformer-no-projection": False,
        "transformer-train-position-embeddings": variant.learned_positions,
        "transformer-guided-alignment-layer": "last",
        "transformer-tied-layers": [],
        "transformer-dropout": 0.1,
        "tied-embeddings": variant.tied == "target",
        "tied-embeddings-all": variant.tied == "all",
        "tied-embeddings-src": variant.tied == "source",
        "right-left": False,
    }


def _params(variant: Variant, sizes: tuple[int, int], rng) -> dict[str, np.ndarray]:
    """Random weights under Marian's names; logits peaked enough that searches agree."""
    p: dict[str, np.ndarray] = {}

    def normal(*shape, scale=0.3):
        return rng.normal(0.0, scale, shape).astype(np.float32)

    def linear(scope, suffix, fan_in, fan_out):
        p[f"{scope}_W{suffix}"] = normal(fan_in, fan_out, scale=fan_in**-0.5)
        p[f"{scope}_b{suffix}"] = normal(1, fan_out, scale=0.1)

    def norm(scope):
        suffix = "_pre" if variant.pre_norm else ""
        p[f"{scope}_ln_scale{suffix}"] = 1.0 + normal(1, D_MODEL, scale=0.1)
        p[f"{scope}_ln_bias{suffix}"] = normal(1, D_MODEL, scale=0.1)

    for side in ("encoder", "decoder"):
        for i in range(1, DEPTH + 1):
            for scope in ["self"] + (["context"] if side == "decoder" else []):
                prefix = f"{side}_l{i}_{scope}"
                for suffix in "qkvo":
                    linear(prefix, suffix, D_MODEL, D_MODEL)
                norm(f"{prefix}_Wo")
            linear(f"{side}_l{i}_ffn", "1", D_MODEL, FFN)
            linear(f"{side}_l{i}_ffn", "2", FFN, D_MODEL)
            norm(f"{side}_l{i}_ffn_ffn")
        if variant.pre_norm:
            p[f"{side}_top_ln_scale"] = 1.0 + normal(1, D_MODEL, scale=0.1)
            p[f"{side}_top_ln_bias"] = normal(1, D_MODEL, scale=0.1)
        if variant.embedding_norm:
            p[f"{side}_emb_ln_scale_pre"] = 1.0 + normal(1, D_MODEL, scale=0.1)
            p[f"{side}_emb_ln_bias_pre"] = normal(1, D_MODEL, scale=0.1)
    if variant.tied in ("all", "source"):
        p["Wemb"] = normal(sizes[0], D_MODEL, scale=0.35)
    else:
        p["encoder_Wemb"] = normal(sizes[0], D_MODEL, scale=0.35)
        p["decoder_Wemb"] = normal(sizes[1], D_MODEL, scale=0.35)
    if variant.tied in ("none", "source"):
        p["decoder_ff_logit_out_W"] = normal(D_MODEL, sizes[1], scale=0.35)
    bias = normal(1, sizes[1], scale=0.5)
    bias[0, 0] += variant.eos_bias  # `</s>`: some hypotheses end before the limit
    p["decoder_ff_logit_out_b"] = bias
    if variant.learned_positions:
        p["Wpos"] = normal(128, D_MODEL, scale=1.0)
    return p


def write_marian_model(
    directory: Path, variant: Variant, source_spm: bytes, target_spm: bytes
) -> Path:
    """Writes an OPUS-MT-style model directory for `variant` (its seed); returns it."""
    rng = np.random.default_rng(variant.seed)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "source.spm").write_bytes(source_spm)
    (directory / "target.spm").write_bytes(target_spm)
    source, target = sentencepiece_pieces(source_spm), sentencepiece_pieces(target_spm)
    if variant.vocabularies == 1:
        shared = _vocabulary(source + target, variant, rng)
        vocabularies = {"opus.spm.vocab.yml": shared}
        names, sizes = ["opus.spm.vocab.yml"] * 2, (len(shared), len(shared))
    else:
        vocabularies = {
            "opus.src.vocab.yml": _vocabulary(source, variant, rng),
            "opus.trg.vocab.yml": _vocabulary(target, variant, rng),
        }
        names = list(vocabularies)
        sizes = tuple(len(v) for v in vocabularies.values())
    for name, pieces in vocabularies.items():
        _write_vocabulary(directory / name, pieces)
    params = _params(variant, sizes, rng)
    options = yaml.safe_dump(_options(variant, list(sizes))).encode("utf-8") + b"\0"
    params["special:model.yml"] = np.frombuffer(options, dtype=np.int8)
    np.savez(directory / "opus.model1.npz", **params)
    decoder = {
        "models": ["opus.model1.npz"],
        "vocabs": names,
        "beam-size": 4,
        "normalize": 1,
        "word-penalty": 0,
        "mini-batch": 16,
        "maxi-batch": 100,
        "maxi-batch-sort": "src",
        "relative-paths": True,
    }
    (directory / "decoder.yml").write_text(yaml.safe_dump(decoder), "utf-8")
    (directory / "README.md").write_text(
        "# opus test model\n\n* source language(s): eng\n* target language(s): deu fra\n"
    )
    return directory


def write_huggingface_model(marian: Path, out: Path) -> Path:
    """The post-norm, tied model in `marian` as transformers' MarianMT stores it."""
    from safetensors.numpy import save_file

    params = dict(np.load(marian / "opus.model1.npz"))
    options = yaml.safe_load(bytes(params.pop("special:model.yml")).rstrip(b"\0"))
    vocabulary = list(
        yaml.load((marian / "opus.spm.vocab.yml").read_text("utf-8"), Loader=yaml.BaseLoader)
    )
    vocabulary.append("<pad>")  # transformers appends the pad token, a zero row
    tensors: dict[str, np.ndarray] = {}

    def linear(hf, scope, suffix):
        tensors[f"{hf}.weight"] = np.ascontiguousarray(params[f"{scope}_W{suffix}"].T)
        tensors[f"{hf}.bias"] = params[f"{scope}_b{suffix}"].reshape(-1)

    def norm(hf, scope):
        tensors[f"{hf}.weight"] = params[f"{scope}_ln_scale"].reshape(-1)
        tensors[f"{hf}.bias"] = params[f"{scope}_ln_bias"].reshape(-1)

    for side in ("encoder", "decoder"):
        for i in range(DEPTH):
            hf, scope = f"model.{side}.layers.{i}", f"{side}_l{i + 1}"
            attentions = [("self_attn", "self")] + (
                [("encoder_attn", "context")] if side == "decoder" else []
            )
            for theirs, ours in attentions:
                for proj, suffix in (
                    ("q_proj", "q"),
                    ("k_proj", "k"),
                    ("v_proj", "v"),
                    ("out_proj", "o"),
                ):
                    linear(f"{hf}.{theirs}.{proj}", f"{scope}_{ours}", suffix)
                norm(f"{hf}.{theirs}_layer_norm", f"{scope}_{ours}_Wo")
            linear(f"{hf}.fc1", f"{scope}_ffn", "1")
            linear(f"{hf}.fc2", f"{scope}_ffn", "2")
            norm(f"{hf}.final_layer_norm", f"{scope}_ffn_ffn")
    table = np.concatenate([params["Wemb"], np.zeros((1, D_MODEL), np.float32)])
    tensors["model.shared.weight"] = table
    bias = np.concatenate([params["decoder_ff_logit_out_b"].reshape(-1), [0.0]]).astype(np.float32)
    tensors["final_logits_bias"] = bias[None, :]
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"))
    config = {
        "model_type": "marian",
        "d_model": D_MODEL,
        "encoder_layers": DEPTH,
        "decoder_layers": DEPTH,
        "encoder_attention_heads": HEADS,
        "decoder_attention_heads": HEADS,
        "encoder_ffn_dim": FFN,
        "decoder_ffn_dim": FFN,
        "activation_function": options["transformer-ffn-activation"],
        "vocab_size": len(vocabulary),
        "pad_token_id": len(vocabulary) - 1,
        "decoder_start_token_id": len(vocabulary) - 1,
        "eos_token_id": 0,
        "scale_embedding": True,
        "share_encoder_decoder_embeddings": True,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "vocab.json").write_text(
        json.dumps({p: i for i, p in enumerate(vocabulary)}, ensure_ascii=False)
    )
    for name in ("source.spm", "target.spm"):
        (out / name).write_bytes((marian / name).read_bytes())
    return out


def marian_sinusoids(d_model: int, num_positions: int) -> np.ndarray:
    """Marian's sinusoid table `[num_positions, d_model]`, as its C++ builds it.

    Marian (`sinusoidalPositionEmbeddings` in src/graph/node_initializers.cpp): sines in the
    first half, cosines in the second, at position p and channel i < d/2 the angle
    p * exp(-i * log(10000) / (d/2 - 1)), in float32.
    """
    half = d_model // 2
    increment = np.float32(np.log(10000.0) / (half - 1))
    angles = np.arange(num_positions, dtype=np.float32)[:, None] * np.exp(
        -np.arange(half, dtype=np.float32)[None, :] * increment
    )
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


def convert_with_ctranslate2(marian: Path, out: Path) -> Path:
    """CTranslate2's `OpusMTConverter` on a Marian directory, with Marian's own sinusoids.

    The converter writes the paper's frequencies 10000^(-2i/d) (as Hugging Face's port
    does), not the table Marian trains with; everything else it reads is its own.
    """
    import ctranslate2

    def table(dim, num_positions=2048):
        return marian_sinusoids(dim, num_positions)

    converter = ctranslate2.converters.marian
    with mock.patch.object(converter, "_make_sinusoidal_position_encodings", table):
        ctranslate2.converters.OpusMTConverter(str(marian)).convert(str(out), force=True)
    return out
