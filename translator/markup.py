"""HTML in, HTML out: the text translated, the markup put back by word alignments.

    translator translate --model runs/m30k --format html -i page.html -o page.de.html

The page is read by Python's own HTML parser (`html.parser`, lenient as a browser's: it
never fails) into blocks: the text of each block element (p, li, td, h1, ...) is one
paragraph, translated as `translate` translates a line (split into sentences, rejoined).
Inline elements (b, a, em, span, ...) are put back around the target words aligned to
the source words they wrapped (`translator.alignment`), nested as they were; `<code>`,
`<kbd>`, `<samp>`, `<var>` and any element with `translate="no"` come back byte for byte,
in place of the words aligned to theirs; `<pre>`, `<script>`, `<style>`, `<textarea>`,
comments and everything between blocks are not translated at all. Tags, attributes and
entities outside the translated text come back as they were written.

What is malformed is repaired as a browser would read it and said once: an inline element
still open where its block ends is closed there, one closed by another's end tag is
closed before it, and an end tag that closes nothing is kept where it stood.
"""

from __future__ import annotations

import bisect
import dataclasses
import html
import re
import unicodedata
from collections.abc import Callable, Sequence
from html.parser import HTMLParser

from translator.languages import word_spans

# Elements whose text is a paragraph of its own (a line break too).
# fmt: off
BLOCKS = frozenset({
    "address", "article", "aside", "blockquote", "body", "br", "caption", "dd", "details",
    "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2",
    "h3", "h4", "h5", "h6", "head", "header", "hr", "html", "legend", "li", "main", "nav",
    "ol", "option", "p", "section", "summary", "table", "tbody", "td", "tfoot", "th",
    "thead", "title", "tr", "ul",
})
# Elements whose content is never translated: whole blocks, and inline spans kept in
# place of the words aligned to theirs.
OPAQUE_BLOCKS = frozenset({"pre", "script", "style", "textarea"})
OPAQUE_INLINE = frozenset({"code", "kbd", "samp", "var"})
# Elements without content or an end tag.
VOID = frozenset({
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
    "source", "track", "wbr",
})
# fmt: on
_SPACES = re.compile(r"\s+")


@dataclasses.dataclass
class Element:
    """An inline element (or a kept token) of a block, over its plain text."""

    # Its start tag as written ("" for a lone end tag or a comment: `raw` holds it).
    open: str
    # Its end tag as written, or the one added where it was left open.
    close: str
    # The characters of the block's text it spans: [start, end).
    start: int
    end: int
    # The element it sits in (an index into the block's elements), None at the top.
    parent: int | None
    # Opaque (`<code>`, translate="no"), a void element, a comment or a lone end tag:
    # all of it as written, put back as it is.
    raw: str | None = None


@dataclasses.dataclass
class Block:
    """A paragraph of an HTML page: its text, and the elements over it."""

    text: str = ""
    elements: list[Element] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Page:
    """An HTML page as what is kept as written and the blocks to translate, in order."""

    # Each part: a string kept as it is, or a `Block`.
    parts: list[str | Block]
    # What was repaired, one phrase each (in the order met).
    repairs: list[str]

    @property
    def blocks(self) -> list[Block]:
        return [part for part in self.parts if isinstance(part, Block)]

    def render(self, translations: Sequence[str], alignments: Sequence[str]) -> str:
        """The page with each block's text replaced by its translation, markup put back.

        Args:
            translations: One per block (`blocks`), in order.
            alignments: Their Pharaoh word alignments to the blocks' texts.
        """
        rendered, index = [], 0
        for part in self.parts:
            if isinstance(part, str):
                rendered.append(part)
                continue
            rendered.append(render_block(part, translations[index], alignments[index]))
            index += 1
        return "".join(rendered)


def parse_html(text: str) -> Page:
    """Reads an HTML page (or fragment) into blocks and what is kept as written."""
    reader = _Reader(text)
    reader.feed(text)
    reader.close()
    return reader.finish()


class _Reader(HTMLParser):
    """`html.parser`'s tokens, each kept as written (its slice of the input), into a `Page`."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=False)
        self.source = text
        # Where each line starts, as the parser counts lines: at "\n" alone.
        self.line_starts = [0, *(index + 1 for index, c in enumerate(text) if c == "\n")]
        self.tokens: list[tuple[str, str, dict, int]] = []  # kind, name or text, attrs, at

    def _at(self) -> int:
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def handle_starttag(self, tag, attrs):
        self.tokens.append(("start", tag, dict(attrs), self._at()))

    def handle_startendtag(self, tag, attrs):
        self.tokens.append(("void", tag, dict(attrs), self._at()))

    def handle_endtag(self, tag):
        self.tokens.append(("end", tag, {}, self._at()))

    def handle_data(self, data):
        self.tokens.append(("text", data, {}, self._at()))

    def handle_entityref(self, name):
        self.tokens.append(("text", html.unescape(f"&{name};"), {}, self._at()))

    def handle_charref(self, name):
        self.tokens.append(("text", html.unescape(f"&#{name};"), {}, self._at()))

    def handle_comment(self, data):
        self.tokens.append(("other", "", {}, self._at()))

    def handle_decl(self, decl):
        self.tokens.append(("other", "", {}, self._at()))

    def handle_pi(self, data):
        self.tokens.append(("other", "", {}, self._at()))

    def unknown_decl(self, data):
        self.tokens.append(("other", "", {}, self._at()))

    def finish(self) -> Page:
        """The tokens, with their text as written, made into a `Page`."""
        ends = [at for *_, at in self.tokens[1:]] + [len(self.source)]
        builder = _PageBuilder(self.line_starts)
        if self.tokens and self.tokens[0][3] > 0:  # (nothing is ever skipped, but be sure)
            builder.keep(self.source[: self.tokens[0][3]])
        for (kind, name, attrs, at), end in zip(self.tokens, ends, strict=True):
            builder.token(kind, name, attrs, self.source[at:end], at)
        return builder.finish()


class _PageBuilder:
    """Tokens in, blocks out: the state of one walk over a page."""

    def __init__(self, line_starts: list[int]):
        self.line_starts = line_starts
        self.parts: list[str | Block] = []
        self.repairs: list[str] = []
        self.block: Block | None = None
        self.open: list[tuple[str, int]] = []  # inline elements open: (name, element index)
        # Inside an element never translated: (its name, nesting depth, raw so far, text
        # so far, whether inline).
        self.opaque: list | None = None
        # The block's text ends with an opaque element's words: what follows is spaced.
        self.spaced = False

    def where(self, at: int) -> str:
        line = bisect.bisect_right(self.line_starts, at)
        return f"line {line}"

    def keep(self, raw: str) -> None:
        if self.parts and isinstance(self.parts[-1], str):
            self.parts[-1] += raw
        else:
            self.parts.append(raw)

    def token(self, kind: str, name: str, attrs: dict, raw: str, at: int) -> None:
        if self.opaque is not None:
            self._opaque_token(kind, name, raw)
            return
        if kind == "start" and (name in OPAQUE_BLOCKS or _untranslated(name, attrs)):
            inline = name not in OPAQUE_BLOCKS and name not in BLOCKS
            if not inline:
                self._end_block(at)
            self.opaque = [name, 1, raw, "", inline]
            return
        if kind in ("start", "void", "end") and name in BLOCKS:
            self._end_block(at)
            self.keep(raw)
            return
        if kind == "text":
            self._text(name, raw)
        elif kind == "start" and name not in VOID:
            block = self._start_block()
            block.elements.append(Element(raw, "", len(block.text), -1, self._parent()))
            self.open.append((name, len(block.elements) - 1))
        elif kind == "end":
            self._end_tag(name, raw, at)
        else:  # a void element, a comment, a declaration: kept where it stands
            if self.block is None:
                self.keep(raw)
            else:
                self._kept(raw)

    def _opaque_token(self, kind: str, name: str, raw: str) -> None:
        state = self.opaque
        assert state is not None
        state[2] += raw
        if kind == "text":
            state[3] += name
        if name == state[0] and kind in ("start", "end"):
            state[1] += 1 if kind == "start" else -1
        if state[1] > 0:
            return
        self.opaque = None
        _, _, whole, text, inline = state
        if not inline:
            self.keep(whole)
            return
        block = self._start_block()
        # What the model reads in its place: its text, as words of their own.
        words = _SPACES.sub(" ", text).strip() or "_"
        if block.text and not block.text.endswith(" "):
            block.text += " "
        start = len(block.text)
        block.text += words
        block.elements.append(Element("", "", start, len(block.text), self._parent(), whole))
        self.spaced = True

    def _text(self, text: str, raw: str) -> None:
        collapsed = _SPACES.sub(" ", text)
        if self.block is None:
            if not collapsed.strip():
                self.keep(raw)
                return
            collapsed = collapsed.lstrip()
            leading = raw[: len(raw) - len(raw.lstrip())]
            if leading:
                self.keep(leading)
        block = self._start_block()
        if block.text.endswith(" ") or not block.text:
            collapsed = collapsed.lstrip()
        elif self.spaced and collapsed[:1] != " ":  # after an opaque element's words
            collapsed = " " + collapsed
        self.spaced = False
        block.text += collapsed

    def _end_tag(self, name: str, raw: str, at: int) -> None:
        names = [open_name for open_name, _ in self.open]
        if name not in names:
            self.repairs.append(f"kept </{name}> at {self.where(at)}, which closes nothing")
            if self.block is None:
                self.keep(raw)
            else:
                self._kept(raw)
            return
        while self.open:
            open_name, index = self.open.pop()
            element = self.block.elements[index]
            element.end = len(self.block.text)
            if open_name == name:
                element.close = raw
                return
            element.close = f"</{open_name}>"
            self.repairs.append(f"closed <{open_name}> before </{name}> at {self.where(at)}")

    def _kept(self, raw: str) -> None:
        block = self.block
        assert block is not None
        at = len(block.text)
        block.elements.append(Element("", "", at, at, self._parent(), raw))

    def _parent(self) -> int | None:
        return self.open[-1][1] if self.open else None

    def _start_block(self) -> Block:
        if self.block is None:
            self.block = Block()
            self.parts.append(self.block)
        return self.block

    def _end_block(self, at: int) -> None:
        if self.block is None:
            return
        trailing = len(self.block.text) - len(self.block.text.rstrip())
        self.block.text = self.block.text.rstrip()
        for name, index in reversed(self.open):
            element = self.block.elements[index]
            element.end, element.close = len(self.block.text), f"</{name}>"
            self.repairs.append(f"closed <{name}> where its block ends, at {self.where(at)}")
        for element in self.block.elements:
            element.start = min(element.start, len(self.block.text))
            element.end = min(element.end, len(self.block.text))
        self.open = []
        self.block = None
        self.spaced = False
        if trailing:
            self.keep(" ")  # the block's last spaces, as the text between blocks

    def finish(self) -> Page:
        if self.opaque is not None:  # never closed: kept as written
            name, _, whole, _, inline = self.opaque
            self.repairs.append(f"<{name}> is never closed: kept as written to the end")
            self.opaque = None
            if inline:
                self._kept(whole) if self.block is not None else self.keep(whole)
            else:
                self.keep(whole)
        self._end_block(self.line_starts[-1])
        return Page(self.parts, self.repairs)


def _untranslated(name: str, attrs: dict) -> bool:
    """Whether an element's content is kept as written (`OPAQUE_INLINE`, translate=no)."""
    return name in OPAQUE_INLINE or (attrs.get("translate") or "").lower() == "no"


def render_block(block: Block, translation: str, alignment: str) -> str:
    """A block's translation with its elements put back around the aligned words.

    Each element spans the target words aligned to the source words it spanned, from
    the first to the last, inside its parent's and clear of its siblings' (which may come
    in another order than in the source); one whose words have no link, or that spans
    none, sits after the target word aligned to the last source word before it.
    """
    source_words = word_spans(block.text)
    target_words = word_spans(translation)
    links: dict[int, list[int]] = {}
    for pair in alignment.split():
        i, _, j = pair.partition("-")
        links.setdefault(int(i), []).append(int(j))
    wanted = [_wanted(element, source_words, links, block.text) for element in block.elements]
    cores = [_split_punctuation(translation[a:b])[1] for a, b in target_words]
    for index, element in enumerate(block.elements):
        if element.raw is not None and element.end > element.start:
            copied = _copied(block.text[element.start : element.end].split(), cores, wanted[index])
            if copied is not None:  # the model copied its words: those are its place
                wanted[index] = (
                    copied,
                    copied + len(block.text[element.start : element.end].split()),
                    False,
                    False,
                    False,
                )
    children: dict[int | None, list[int]] = {}
    for index, element in enumerate(block.elements):
        children.setdefault(element.parent, []).append(index)
    spans: dict[int, tuple[int, int]] = {}

    def settle(parent: int | None, low: int, high: int) -> None:
        kids = sorted(children.get(parent, []), key=lambda kid: wanted[kid][:2])
        previous = low
        for kid in kids:
            start = min(max(wanted[kid][0], previous), high)
            end = min(max(wanted[kid][1], start), high)
            spans[kid] = (start, end)
            previous = end
            settle(kid, start, end)
        children[parent] = kids  # in the target's order

    settle(None, 0, len(target_words))
    return _compose(block, translation, target_words, spans, children, wanted)


def _wanted(
    element: Element, source_words: list[tuple[int, int]], links: dict[int, list[int]], text: str
) -> tuple[int, int, bool, bool, bool]:
    """An element's target words by the links alone: `(start, end, sticks, head, tail)`.

    `sticks`: it spans no word and touches the end of the word before it (`dog</em>`),
    so it goes before the space after that word's translation. `head`, `tail`: its first
    (last) word has punctuation outside it (`(<b>dog</b>).`), which stays outside it in
    the translation too.
    """
    inside = [
        k
        for k, (start, end) in enumerate(source_words)
        if start < element.end and end > element.start
    ]
    targets = sorted(j for i in inside for j in links.get(i, ()))
    if targets:
        first, last = source_words[inside[0]], source_words[inside[-1]]
        head = _punctuation(text[first[0] : element.start])
        tail = _punctuation(text[element.end : last[1]])
        return targets[0], targets[-1] + 1, False, head, tail
    before = [k for k, (_, end) in enumerate(source_words) if end <= element.start]
    aligned = [j for i in before for j in links.get(i, ())]
    at = max(aligned) + 1 if aligned else 0
    touches = bool(aligned) and source_words[before[-1]][1] == element.start
    return at, at, touches, False, False


def _copied(
    words: list[str], cores: list[str], wanted: tuple[int, int, bool, bool, bool]
) -> int | None:
    """Where the target copies `words` (punctuation aside), nearest the aligned place."""
    found = [
        start
        for start in range(len(cores) - len(words) + 1)
        if cores[start : start + len(words)] == [_split_punctuation(w)[1] for w in words]
    ]
    return min(found, key=lambda start: abs(start - wanted[0])) if found else None


def _punctuation(text: str) -> bool:
    """Whether `text` is punctuation alone (and not empty)."""
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def _split_punctuation(word: str) -> tuple[str, str, str]:
    """A word as its leading punctuation, the rest, and its trailing punctuation."""
    start, end = 0, len(word)
    while start < end and unicodedata.category(word[start]).startswith("P"):
        start += 1
    while end > start and unicodedata.category(word[end - 1]).startswith("P"):
        end -= 1
    return word[:start], word[start:end], word[end:]


def _compose(
    block: Block,
    translation: str,
    words: list[tuple[int, int]],
    spans: dict[int, tuple[int, int]],
    children: dict[int | None, list[int]],
    wanted: list[tuple[int, int, bool, bool, bool]],
) -> str:
    """The translation's words and the spaces between them, the elements around them.

    Each element's tags go around its words, the spaces before its first word and after
    its last outside it (and punctuation that was outside it in the source); an opaque
    element stands in place of its words, their outer punctuation kept around it.
    """
    count = len(words)

    def word_text(index: int) -> str:
        return translation[words[index][0] : words[index][1]]

    def gap(boundary: int) -> str:  # the text before word `boundary`, after the one before
        start = words[boundary - 1][1] if boundary > 0 else 0
        end = words[boundary][0] if boundary < count else len(translation)
        return _escape(translation[start:end])

    def inside(low: int, high: int, kids: list[int]) -> list[str]:
        out: list[str] = []
        done = {low, high}  # the spaces at the ends are the caller's

        def space(boundary: int) -> None:
            if boundary not in done:
                done.add(boundary)
                out.append(gap(boundary))

        position = low
        for child in kids:
            start, end = spans[child]
            for word in range(position, start):
                space(word)
                out.append(_escape(translation[words[word][0] : words[word][1]]))
            _, _, sticks, head, tail = wanted[child]
            if not (sticks and start == end):
                space(start)
            element = block.elements[child]
            if element.raw is not None:  # in place of its words, their punctuation kept
                before = _split_punctuation(word_text(start))[0] if end > start else ""
                after = _split_punctuation(word_text(end - 1))[2] if end > start else ""
                out.extend((_escape(before), element.raw, _escape(after)))
            else:
                body = inside(start, end, children.get(child, []))
                before, after = _outer_punctuation(body, word_text, start, end, head, tail)
                out.extend((_escape(before), element.open, *body, element.close, _escape(after)))
            position = max(position, end)
        for word in range(position, high):
            space(word)
            out.append(_escape(translation[words[word][0] : words[word][1]]))
        return out

    if not count:  # no words: the elements, empty, then what there is
        return "".join(inside(0, 0, children.get(None, []))) + _escape(translation)
    return gap(0) + "".join(inside(0, count, children.get(None, []))) + gap(count)


def _outer_punctuation(
    body: list[str], word_text: Callable[[int], str], start: int, end: int, head: bool, tail: bool
) -> tuple[str, str]:
    """Takes the punctuation that belongs outside an element off its body's ends.

    Only where the body begins (ends) with its first (last) word as it is.

    Returns:
        `(before, after)`: what goes before its start tag and after its end tag.
    """
    if not body or end <= start:
        return "", ""
    first, last = word_text(start), word_text(end - 1)
    before = _split_punctuation(first)[0] if head and body[0] == _escape(first) else ""
    after = _split_punctuation(last)[2] if tail and body[-1] == _escape(last) else ""
    if before and after and len(body) == 1:  # one word: punctuation both sides
        body[0] = _escape(first[len(before) : len(first) - len(after)])
        return before, after
    if before:
        body[0] = _escape(first[len(before) :])
    if after:
        body[-1] = _escape(last[: len(last) - len(after)])
    return before, after


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def translate_page(
    text: str, translate: Callable[[list[str]], list[tuple[str, str]]]
) -> tuple[str, list[str]]:
    """An HTML page translated, its markup kept; and what was repaired.

    Args:
        text: The page (or fragment).
        translate: Paragraphs -> (translation, Pharaoh alignment) each.
    """
    page = parse_html(text)
    blocks = page.blocks
    found = translate([block.text for block in blocks]) if blocks else []
    return page.render([t for t, _ in found], [a for _, a in found]), page.repairs
