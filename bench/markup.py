"""Markup kept: a test set with tags planted around words, translated as an HTML page.

    python -m bench.markup --model runs/m30k --src test_2016_flickr.en.gz \
        --ref test_2016_flickr.de.gz --source-lang en

Each sentence becomes a paragraph (`<p>`) with tags planted (seeded) around one or two
runs of 1 to 3 words: `<b>`, `<a href="...">` or `<em>`, and in every fourth a word in
`<code>`. Reported: outputs well-formed (every end tag closes the element open, by
Python's HTML parser), the same multiset of tags as the input, every `<code>` span byte
for byte, text-only BLEU (tags stripped) beside the plain translation's, and tag
placement: the share of planted tags (not `<code>`) whose translated span holds the
words that the plain translation's alignment links to the words they wrapped, beside a
baseline that puts each tag around the last word. (That alignment is the model's own:
the placement says how well the tags follow it through a tagged translation.)
"""

from __future__ import annotations

import argparse
import html
import re
from collections import Counter
from html.parser import HTMLParser

import numpy as np

from translator.io import read_lines
from translator.languages import word_spans

# Each planted tag carries its number (data-n), so its span is found whatever the order.
TAGS = (
    ('<b data-n="{}">', "</b>"),
    ('<a href="https://example.com/?a=1&amp;b=2" data-n="{}">', "</a>"),
    ('<em data-n="{}">', "</em>"),
)


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.starts, self.open, self.balanced = Counter(), [], True
        self.spans: dict[str, tuple[int, int]] = {}  # start tag -> its text's characters
        self.text = ""
        self.stack: list[tuple[str, str, int]] = []

    def handle_starttag(self, tag, attrs):
        self.starts[self.get_starttag_text()] += 1
        self.open.append(tag)
        self.stack.append((tag, self.get_starttag_text(), len(self.text)))

    def handle_endtag(self, tag):
        self.balanced &= bool(self.open) and self.open.pop() == tag
        if self.stack and self.stack[-1][0] == tag:
            _, start_tag, start = self.stack.pop()
            self.spans[start_tag] = (start, len(self.text))

    def handle_data(self, data):
        self.text += data

    def handle_entityref(self, name):
        self.text += html.unescape(f"&{name};")

    def handle_charref(self, name):
        self.text += html.unescape(f"&#{name};")


def read(page: str) -> _Tags:
    reader = _Tags()
    reader.feed(page)
    reader.close()
    return reader


def plant(sentence: str, rng: np.random.Generator, number: int) -> tuple[str, list]:
    """The sentence as a paragraph with tags around runs of its words, and the runs."""
    words = sentence.split()
    runs, taken = [], set()
    for _ in range(int(rng.integers(1, 3))):
        length = int(rng.integers(1, 4))
        start = int(rng.integers(0, max(len(words) - length, 0) + 1))
        span = set(range(start, min(start + length, len(words))))
        if span & taken or not span:
            continue
        taken |= span
        open_tag, close_tag = TAGS[int(rng.integers(0, len(TAGS)))]
        runs.append((min(span), max(span) + 1, (open_tag.format(len(runs)), close_tag)))
    if number % 4 == 0:
        free = [k for k in range(len(words)) if k not in taken]
        if free:
            k = free[int(rng.integers(0, len(free)))]
            runs.append((k, k + 1, ("<code>", "</code>")))
    out = []
    for k, word in enumerate(words):
        opens = [tag for start, _, tag in runs if start == k]
        closes = [tag for _, end, tag in runs if end == k + 1]
        escaped = html.escape(word, quote=False)
        out.append("".join(o for o, _ in opens) + escaped + "".join(c for _, c in closes))
    return "<p>" + " ".join(out) + "</p>", sorted(runs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--source-lang", required=True)
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    import sacrebleu

    from translator.engines import load_translator
    from translator.engines.base import InferenceOptions
    from translator.markup import translate_page
    from translator.search import SearchConfig

    sources = [line.rstrip("\n") for line in read_lines(args.src)][: args.sentences]
    references = [line.rstrip("\n") for line in read_lines(args.ref)][: args.sentences]
    rng = np.random.default_rng(args.seed)
    planted = [plant(sentence, rng, k) for k, sentence in enumerate(sources)]
    options = InferenceOptions(source_lang=args.source_lang)
    translator = load_translator(args.model, SearchConfig(), options).translator
    plain = translator.search(sources, alignments=True).hypotheses

    def translate(paragraphs):
        found = translator.search(paragraphs, alignments=True).hypotheses
        return [(h[0].text, h[0].alignment or "") if h else ("", "") for h in found]

    outputs = [translate_page(page, translate)[0] for page, _ in planted]
    totals: Counter = Counter()
    texts = []
    for (page, runs), output, found in zip(planted, outputs, plain, strict=True):
        totals += _page_counts(page, runs, output, found[0])
        texts.append(read(output).text)
    well_formed, same_tags, code_kept, codes = (
        totals[k] for k in ("well_formed", "same_tags", "code_kept", "codes")
    )
    placed, baseline, tags = totals["placed"], totals["baseline"], totals["tags"]
    bleu_tagged = sacrebleu.corpus_bleu(texts, [references]).score
    plain_texts = [h[0].text if h else "" for h in plain]
    bleu_plain = sacrebleu.corpus_bleu(plain_texts, [references]).score
    # Without the sentences holding <code>, whose words stay in the source language.
    free = [k for k, (page, _) in enumerate(planted) if "<code>" not in page]

    def subset(hypotheses):
        chosen = [hypotheses[k] for k in free]
        return sacrebleu.corpus_bleu(chosen, [[references[k] for k in free]]).score

    count = len(planted)
    print(f"{count} sentences, {tags} planted tags (not code), {codes} <code> spans\n")
    print("| measure | value |")
    print("|---|---:|")
    print(f"| well-formed outputs | {well_formed} of {count} ({100 * well_formed / count:.1f}%) |")
    print(f"| outputs with the input's tags (multiset) | {same_tags} of {count} |")
    print(f"| <code> spans byte for byte | {code_kept} of {codes} |")
    print(f"| tag placement | {100 * placed / max(tags, 1):.1f}% |")
    print(
        f"| tag placement, every tag around the last word | {100 * baseline / max(tags, 1):.1f}% |"
    )
    print(f"| text BLEU, tagged (tags stripped) | {bleu_tagged:.2f} |")
    print(f"| text BLEU, plain translation | {bleu_plain:.2f} |")
    print(f"| text BLEU, tagged, the {len(free)} sentences without <code> | {subset(texts):.2f} |")
    print(f"| text BLEU, plain, the same sentences | {subset(plain_texts):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def _page_counts(page: str, runs: list, output: str, found) -> Counter:
    """One page's counts: well-formed, same tags, code kept, tags placed (and by the
    baseline that puts every tag around the last word)."""
    before, after = read(page), read(output)
    wanted = re.findall(r"<code>.*?</code>", page)
    counts = Counter(
        well_formed=int(after.balanced),
        same_tags=int(after.starts == before.starts),
        codes=len(wanted),
        code_kept=sum(span in output for span in wanted),
    )
    links: dict[int, set[int]] = {}
    for pair in (found.alignment or "").split():
        i, _, j = pair.partition("-")
        links.setdefault(int(i), set()).add(int(j))
    plain_words = [found.text[a:b] for a, b in word_spans(found.text)]
    output_words = [after.text[a:b] for a, b in word_spans(after.text)]
    for start, end, (open_tag, _) in runs:
        if open_tag == "<code>":
            continue
        aligned = {j for i in range(start, end) for j in links.get(i, ())}
        want = Counter(plain_words[j] for j in aligned)
        s, e = after.spans.get(open_tag, (0, 0))
        held = after.text[s:e]
        inside = Counter(held[a:b] for a, b in word_spans(held))
        counts["tags"] += 1
        counts["placed"] += not (want - inside)
        counts["baseline"] += not (want - Counter(output_words[-1:]))
    return counts
