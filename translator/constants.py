"""Special ids and pieces, a default that training and decoding share, the tags' names.

A leaf module (it imports nothing). The ids of every model `translator` trains:

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

# Tokens per batch, padding included, for training and decoding alike.
DEFAULT_BATCH_TOKENS = 4096

# The field separator of n-best lists (Moses' convention): "INDEX ||| TEXT ||| SCORE".
NBEST_SEPARATOR = " ||| "

# The share of the target's probability mass spread over the vocabulary (the paper's).
DEFAULT_LABEL_SMOOTHING = 0.1

# Batches a `Translator` decodes at once with our search (`--parallel-batches`): a second
# batch fills the cores a batch's last few rows leave idle (decision D6).
DEFAULT_PARALLEL_BATCHES = 2


def language_tag(language: str, tags: tuple[str, ...] = ()) -> str:
    """The tag of a target language: what `--target-lang` stands for.

    `<2de>` for "de", or Marian's `>>deu<<` for "deu" where the model's `tags` have it
    (an imported multilingual OPUS-MT model).
    """
    marian = f">>{language}<<"
    return marian if marian in tags else f"<2{language}>"
