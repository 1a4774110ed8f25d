"""Reading a Marian model as OPUS-MT ships it, or as Hugging Face's MarianMT stores it.

Both layouts are read into one `MarianFiles`: the parameters under Marian's names, its
`special:model.yml` options, the vocabularies (piece lists by Marian id) and the two
SentencePiece models. Everything after (`options`, `vocabulary`, `weights`) sees only
that, so the Hugging Face layout is a renaming here and nothing else.

Marian (a directory or the zip itself):

    decoder.yml        names the .npz (`models:`) and the vocabularies (`vocabs:`)
    *.npz              the parameters, and `special:model.yml` (the training options)
    *.vocab.yml        piece: id, one vocabulary shared by both sides, or one per side
    source.spm, target.spm

Hugging Face: `config.json`, `model.safetensors`, `vocab.json` (and `target_vocab.json`
for separate vocabularies), `source.spm`, `target.spm`.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from translator.errors import TranslatorError
from translator.io import one_line

# The parameter holding Marian's options, as YAML bytes (NUL-terminated).
OPTIONS_KEY = "special:model.yml"
SPM_FILES = ("source.spm", "target.spm")
# A multilingual model's target-language tokens: >>fra<<, >>zho_Hans<<.
LANGUAGE_TOKEN = re.compile(r"^>>([A-Za-z][A-Za-z0-9_]*)<<$")


class MarianImportError(TranslatorError, ValueError):
    """A Marian or Hugging Face model that cannot be imported; the message names why."""


@dataclasses.dataclass(frozen=True)
class MarianFiles:
    """One Marian model, whatever the layout it came in."""

    # Where it was read from (a directory or a zip).
    origin: Path
    # "marian" or "huggingface".
    layout: str
    # Parameters under Marian's names (`encoder_l1_self_Wq`, `Wemb`, ...), float32.
    params: dict[str, np.ndarray]
    # Marian's options (`special:model.yml`): `enc-depth`, `transformer-heads`, ...
    options: dict[str, Any]
    # Pieces by Marian id: one list (shared by both sides) or (source, target).
    vocabularies: tuple[list[str], ...]
    # Serialized SentencePiece models, source and target.
    source_spm: bytes
    target_spm: bytes
    # Source and target languages as the model's README names them, if it does.
    languages: tuple[str, str] | None = None

    @property
    def source_vocabulary(self) -> list[str]:
        return self.vocabularies[0]

    @property
    def target_vocabulary(self) -> list[str]:
        return self.vocabularies[-1]

    @property
    def language_tokens(self) -> tuple[str, ...]:
        """The target-language tokens of a multilingual model (`>>fra<<`), in vocab order."""
        return tuple(piece for piece in self.source_vocabulary if LANGUAGE_TOKEN.match(piece))


class _Source:
    """The files of a directory or a zip, by base name (OPUS-MT zips are flat)."""

    def __init__(self, path: Path):
        self.path = path
        if path.is_file() and zipfile.is_zipfile(path):
            try:
                self._zip = zipfile.ZipFile(path)
            except zipfile.BadZipFile as error:
                raise MarianImportError(f"{path}: a broken zip file ({error})") from None
            members = [m for m in self._zip.namelist() if not m.endswith("/")]
            self._names = {Path(m).name: m for m in members}
        elif path.is_dir():
            self._zip = None
            self._names = {p.name: p.name for p in path.iterdir() if p.is_file()}
        else:
            raise MarianImportError(f"{path}: neither a model directory nor a zip file")

    def __enter__(self) -> _Source:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._zip is not None:
            self._zip.close()

    def names(self) -> list[str]:
        return sorted(self._names)

    def has(self, name: str) -> bool:
        return name in self._names

    def read(self, name: str, role: str) -> bytes:
        if name not in self._names:
            raise MarianImportError(f"{self.path}: no {name} ({role})")
        if self._zip is not None:
            return self._zip.read(self._names[name])
        return (self.path / self._names[name]).read_bytes()


def is_marian_model(path: str | Path) -> bool:
    """Whether `read_model` takes `path`, judged by its file names.

    A directory or zip with `decoder.yml` (Marian), or with `config.json` beside
    `model.safetensors` or `pytorch_model.bin` (Hugging Face). Our own model directories
    and `.keras` files (zips too, with a `config.json`) are not.
    """
    try:
        with _Source(Path(path)) as source:
            weights = source.has("model.safetensors") or source.has("pytorch_model.bin")
            return source.has("decoder.yml") or (source.has("config.json") and weights)
    except MarianImportError:  # neither a directory nor a readable zip
        return False


def read_model(path: str | Path) -> MarianFiles:
    """Reads a Marian model directory or zip, or a Hugging Face MarianMT directory.

    Raises:
        MarianImportError: a missing file (named), a BPE model, a PyTorch-only checkpoint,
            or a file that cannot be parsed.
    """
    with _Source(Path(path)) as source:
        if source.has("config.json") and not source.has("decoder.yml"):
            return _read_huggingface(source)
        if not source.has("decoder.yml"):
            if source.has("pytorch_model.bin"):
                raise _pytorch_only(source.path)
            raise MarianImportError(
                f"{source.path}: no decoder.yml (Marian) or config.json (Hugging Face); "
                f"it holds {', '.join(source.names()) or 'nothing'}"
            )
        return _read_marian(source)


def _pytorch_only(path: Path) -> MarianImportError:
    return MarianImportError(
        f"{path}: only pytorch_model.bin, which is read with torch; convert it to "
        "model.safetensors first (transformers: `MarianMTModel.from_pretrained(DIR)."
        "save_pretrained(OUT, safe_serialization=True)`)"
    )


def _check_sentencepiece(source: _Source) -> tuple[bytes, bytes]:
    missing = [name for name in SPM_FILES if not source.has(name)]
    if missing:
        if any(name.endswith((".bpe", "codes")) for name in source.names()):
            raise MarianImportError(
                f"{source.path}: a BPE (subword-nmt) model; only SentencePiece models "
                "(source.spm, target.spm) are supported"
            )
        raise MarianImportError(f"{source.path}: no {' or '.join(missing)}")
    return source.read("source.spm", "source model"), source.read("target.spm", "target model")


def _read_marian(source: _Source) -> MarianFiles:
    import yaml

    decoder = _yaml(source.read("decoder.yml", "the decoder config"), "decoder.yml")
    models, vocabs = decoder.get("models") or [], decoder.get("vocabs") or []
    if not models or not vocabs:
        raise MarianImportError(f"{source.path}: decoder.yml names no models: or vocabs:")
    source_spm, target_spm = _check_sentencepiece(source)
    npz_name = Path(models[0]).name
    try:
        with np.load(io.BytesIO(source.read(npz_name, "the model"))) as archive:
            params = {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as error:
        raise MarianImportError(f"{source.path}/{npz_name}: not an .npz file ({error})") from None
    if OPTIONS_KEY not in params:
        raise MarianImportError(
            f"{source.path}/{npz_name}: no {OPTIONS_KEY} (Marian's options); re-save it "
            "with a Marian that writes them"
        )
    raw = params.pop(OPTIONS_KEY)
    try:
        options = yaml.safe_load(bytes(raw).rstrip(b"\0").decode("utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise MarianImportError(
            f"{npz_name}: {OPTIONS_KEY} is not YAML ({one_line(str(error))})"
        ) from None
    names = [Path(name).name for name in vocabs]
    unique = list(dict.fromkeys(names))  # one vocabulary listed twice = shared
    vocabularies = tuple(
        read_vocabulary(source.read(name, "a vocabulary"), name) for name in unique
    )
    return MarianFiles(
        origin=source.path,
        layout="marian",
        params={name: np.asarray(value, np.float32) for name, value in params.items()},
        options=options,
        vocabularies=vocabularies,
        source_spm=source_spm,
        target_spm=target_spm,
        languages=_languages(source),
    )


def _yaml(data: bytes, name: str) -> dict[str, Any]:
    import yaml

    try:
        loaded = yaml.safe_load(data.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise MarianImportError(f"{name}: not YAML ({one_line(str(error))})") from None
    if not isinstance(loaded, dict):
        raise MarianImportError(f"{name}: expected a mapping, got {type(loaded).__name__}")
    return loaded


def read_vocabulary(data: bytes, name: str) -> list[str]:
    """A Marian `.yml` vocabulary (`piece: id` per line) as its pieces by id.

    Read with YAML's base loader, which keeps every key a string (`yes`, `null` and `1`
    are pieces, not a bool, None and an int).

    Raises:
        MarianImportError: not YAML, or ids that are not 0 .. n-1 once each.
    """
    import yaml

    try:
        mapping = yaml.load(data.decode("utf-8"), Loader=yaml.BaseLoader)
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        reason = one_line(str(error))
        raise MarianImportError(f"{name}: not a Marian vocabulary ({reason})") from None
    if not isinstance(mapping, dict):
        raise MarianImportError(f"{name}: not a Marian vocabulary (no piece: id mapping)")
    pieces: list[str | None] = [None] * len(mapping)
    for piece, text in mapping.items():
        index = int(text) if str(text).isdigit() else -1
        if not 0 <= index < len(pieces) or pieces[index] is not None:
            raise MarianImportError(
                f"{name}: id {text!r} of {piece!r} is not one of 0 .. {len(pieces) - 1} "
                "given once each"
            )
        pieces[index] = piece
    return pieces  # type: ignore[return-value]  (every slot was filled above)


def _languages(source: _Source) -> tuple[str, str] | None:
    """The languages an OPUS-MT README states, or those of an `opus-mt-en-de` name."""
    if source.has("README.md"):
        text = source.read("README.md", "README").decode("utf-8", "replace")
        found = [
            re.search(rf"\*\s*{side} language\(s\):\s*(.+)", text) for side in ("source", "target")
        ]
        if all(found):
            return found[0].group(1).strip(), found[1].group(1).strip()
    match = re.search(r"opus-mt-([a-z_]+)-([a-z_]+)", source.path.name)
    return (match.group(1), match.group(2)) if match else None


# ---- Hugging Face's MarianMT layout, renamed to Marian's ---------------------------------

# Hugging Face's activation names and Marian's.
HF_ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu"}


def _read_huggingface(source: _Source) -> MarianFiles:
    try:
        return _read_huggingface_files(source)
    except (KeyError, ValueError) as error:
        if isinstance(error, MarianImportError):
            raise
        raise MarianImportError(
            f"{source.path}: config.json or model.safetensors lacks {one_line(str(error))} "
            "(a MarianMT model has it)"
        ) from None


def _read_huggingface_files(source: _Source) -> MarianFiles:
    config = json.loads(source.read("config.json", "the model config"))
    if not source.has("model.safetensors"):
        if source.has("pytorch_model.bin"):
            raise _pytorch_only(source.path)
        raise MarianImportError(f"{source.path}: no model.safetensors")
    source_spm, target_spm = _check_sentencepiece(source)
    try:
        from safetensors.numpy import load as load_safetensors
    except ImportError:  # pragma: no cover  (a dependency)
        raise MarianImportError(
            "reading model.safetensors needs `pip install safetensors`"
        ) from None
    tensors = load_safetensors(source.read("model.safetensors", "the weights"))
    # transformers' MarianConfig defaults, for keys a config.json leaves out.
    activation = config.get("activation_function", "gelu")
    heads = config.get("decoder_attention_heads", config["encoder_attention_heads"])
    if heads != config["encoder_attention_heads"]:
        raise MarianImportError(
            f"{source.path}/config.json: decoder_attention_heads {heads} != "
            f"encoder_attention_heads {config['encoder_attention_heads']}"
        )
    if activation not in HF_ACTIVATIONS:
        raise MarianImportError(
            f"{source.path}/config.json: activation_function {activation!r} is not Marian's "
            f"(supported: {', '.join(HF_ACTIVATIONS)})"
        )
    vocabularies = [_json_vocabulary(source, "vocab.json")]
    if source.has("target_vocab.json"):
        vocabularies.append(_json_vocabulary(source, "target_vocab.json"))
    shared = bool(config.get("share_encoder_decoder_embeddings", len(vocabularies) == 1))
    params = _huggingface_params(tensors, config, shared)
    options = {
        "type": "transformer",
        "dim-emb": config["d_model"],
        "enc-depth": config["encoder_layers"],
        "dec-depth": config["decoder_layers"],
        "transformer-heads": config["encoder_attention_heads"],
        "transformer-dim-ffn": config["encoder_ffn_dim"],
        "transformer-decoder-dim-ffn": config.get("decoder_ffn_dim", config["encoder_ffn_dim"]),
        "transformer-ffn-activation": HF_ACTIVATIONS[activation],
        # MarianMT is post-norm, with no embedding norm, and scales embeddings.
        "transformer-preprocess": "",
        "transformer-postprocess": "dan",
        "transformer-postprocess-emb": "d",
        "tied-embeddings-all": shared,
        "tied-embeddings": not shared,
        "huggingface": {"scale_embedding": config.get("scale_embedding", False)},
    }
    return MarianFiles(
        origin=source.path,
        layout="huggingface",
        params=params,
        options=options,
        vocabularies=tuple(vocabularies),
        source_spm=source_spm,
        target_spm=target_spm,
        languages=_languages(source),
    )


def _json_vocabulary(source: _Source, name: str) -> list[str]:
    mapping = json.loads(source.read(name, "a vocabulary"))
    pieces: list[str | None] = [None] * len(mapping)
    for piece, index in mapping.items():
        if not isinstance(index, int) or not 0 <= index < len(pieces) or pieces[index] is not None:
            raise MarianImportError(f"{name}: id {index!r} of {piece!r} is out of place")
        pieces[index] = piece
    return pieces  # type: ignore[return-value]


def _huggingface_params(tensors: dict, config: dict, shared: bool) -> dict[str, np.ndarray]:
    """MarianMT's tensors under Marian's names (Linear weights `[out, in]` transposed)."""
    params: dict[str, np.ndarray] = {}
    take = {name: np.asarray(value, np.float32) for name, value in tensors.items()}

    def linear(hf: str, marian: str, suffix: str) -> None:
        params[f"{marian}_W{suffix}"] = take.pop(f"{hf}.weight").T
        params[f"{marian}_b{suffix}"] = take.pop(f"{hf}.bias")[None, :]

    def norm(hf: str, marian: str) -> None:
        params[f"{marian}_ln_scale"] = take.pop(f"{hf}.weight")[None, :]
        params[f"{marian}_ln_bias"] = take.pop(f"{hf}.bias")[None, :]

    def attention(hf: str, marian: str) -> None:
        for ours, theirs in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "out_proj")):
            linear(f"{hf}.{theirs}", marian, ours)

    for side, depth in (
        ("encoder", config["encoder_layers"]),
        ("decoder", config["decoder_layers"]),
    ):
        for i in range(depth):
            hf, marian = f"model.{side}.layers.{i}", f"{side}_l{i + 1}"
            attention(f"{hf}.self_attn", f"{marian}_self")
            norm(f"{hf}.self_attn_layer_norm", f"{marian}_self_Wo")
            if side == "decoder":
                attention(f"{hf}.encoder_attn", f"{marian}_context")
                norm(f"{hf}.encoder_attn_layer_norm", f"{marian}_context_Wo")
            linear(f"{hf}.fc1", f"{marian}_ffn", "1")
            linear(f"{hf}.fc2", f"{marian}_ffn", "2")
            norm(f"{hf}.final_layer_norm", f"{marian}_ffn_ffn")
        take.pop(f"model.{side}.embed_positions.weight", None)  # static sinusoids
    embeddings = {
        side: take.pop(f"model.{side}.embed_tokens.weight", None) for side in ("encoder", "decoder")
    }
    if shared:
        table = take.pop("model.shared.weight", None)
        params["Wemb"] = table if table is not None else embeddings["encoder"]
    else:
        params["encoder_Wemb"] = embeddings["encoder"]
        params["decoder_Wemb"] = embeddings["decoder"]
        take.pop("model.shared.weight", None)
    lm_head = take.pop("lm_head.weight", None)
    target = params.get("Wemb", params.get("decoder_Wemb"))
    if lm_head is not None and not np.array_equal(lm_head, target):
        params["decoder_ff_logit_out_W"] = lm_head.T  # an untied output layer
    params["decoder_ff_logit_out_b"] = take.pop("final_logits_bias")
    # Whatever is left has no Marian counterpart: `options` reports it as unsupported.
    params.update({f"huggingface:{name}": value for name, value in take.items()})
    return params
