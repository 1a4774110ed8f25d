"""Special ids and pieces, a default that training and decoding share, the tags' names.

The ids are the vocabulary convention of every model `translator` trains.

A leaf module (it imports nothing), so the layers, the search, the pipelines and the
export all read these facts from one place.

    PAD_ID = 0   padding; the model masks it out and the loss ignores it
    UNK_ID = 1   unknown piece (rare: byte fallback spells unseen characters as bytes)
    BOS_ID = 2   begins the decoder input
    EOS_ID = 3   ends source sequences, labels and every generated hypothesis
"""

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3

PAD_PIECE = "<pad>"
UNK_PIECE = "<unk>"
BOS_PIECE = "<s>"
EOS_PIECE = "</s>"

# (pad, unk, bos, eos): the order SentencePiece reports them in.
SPECIAL_IDS = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)

# Tokens per batch, padding included, where nothing else is set: the training batch
# (`translator.pipelines.PipelineConfig`) and the decoding batch
# (`translator.engines.InferenceOptions`, `--batch-tokens`).
DEFAULT_BATCH_TOKENS = 4096

# Batches a `Translator` decodes at once with our search (`--parallel-batches`,
# `translator.engines.InferenceOptions`). A batch's last steps decode its few longest
# sentences, too few rows to keep the cores busy; a second batch in flight fills them.
# Chosen on Multi30k's validation set on 2 cores: 2, 3 and 4 decoded alike, all well
# ahead of 1 (bench/RESULTS.md, engines); any value gives the same translations.
DEFAULT_PARALLEL_BATCHES = 2


def language_tag(language: str) -> str:
    """The tag of a target language, `<2de>` for "de": what `--target-lang` stands for.

    A multilingual model is trained with it prepended to each corpus's sources, and asked
    for that language with it at inference.
    """
    return f"<2{language}>"
