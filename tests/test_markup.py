"""`translator.markup`: HTML in, HTML out, the markup put back by word alignments.

With translations whose alignments are known (the text itself; its words reversed), the
page must come back with every tag, attribute and entity as written, each inline element
around the words it wrapped, `<code>` byte for byte; malformed pages are repaired as
said, nothing dropped. The control: the words reversed move the tags with them.
"""

from collections import Counter
from html.parser import HTMLParser

import pytest

from translator.languages import word_spans
from translator.markup import translate_page


def identity(texts):
    return [(text, " ".join(f"{i}-{i}" for i in range(len(word_spans(text))))) for text in texts]


def reversal(texts):
    found = []
    for text in texts:
        words = text.split()
        count = len(words)
        pairs = " ".join(f"{i}-{count - 1 - i}" for i in range(count))
        found.append((" ".join(reversed(words)), " ".join(sorted(pairs.split()))))
    return found


class Tags(HTMLParser):
    """The start and end tags of a page, and whether each end closes the last open."""

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.starts, self.ends, self.open, self.balanced = Counter(), Counter(), [], True

    def handle_starttag(self, tag, attrs):
        self.starts[self.get_starttag_text()] += 1
        if tag not in ("br", "img", "hr", "input", "meta", "link", "wbr"):
            self.open.append(tag)

    def handle_endtag(self, tag):
        self.ends[tag] += 1
        self.balanced &= bool(self.open) and self.open.pop() == tag


def tags(page: str) -> Tags:
    reader = Tags()
    reader.feed(page)
    reader.close()
    return reader


PAGE = (
    "<!doctype html>\n<html><head><title>A page</title></head>\n<body>\n"
    '<h1 class="title">Two <em>small</em> dogs</h1>\n'
    '<p>A <b>big <a href="/x?a=1&amp;b=2">brown</a> dog</b> runs &amp; jumps.</p>\n'
    '<ul><li>Run <code>ls -la &lt;dir&gt;</code> now.</li><li translate="no">Keep me</li></ul>\n'
    "<pre>  do   not\n  touch  </pre><!-- a comment -->\n"
    "</body></html>\n"
)


def test_the_text_itself_gives_the_page_back_byte_for_byte():
    page, repairs = translate_page(PAGE, identity)
    assert page == PAGE and repairs == []


def test_inline_elements_follow_their_words():
    page, _ = translate_page("<p>A <b>big</b> brown <i>dog</i> runs.</p>", reversal)
    assert page == "<p>runs. <i>dog</i> brown <b>big</b> A</p>"
    page, _ = translate_page('<p>one <a href="#">two three</a> four</p>', reversal)
    assert page == '<p>four <a href="#">three two</a> one</p>'  # the span moved whole


def test_code_comes_back_byte_for_byte_where_its_words_went():
    page, _ = translate_page("<p>Run <code>ls &lt;x&gt;</code> now.</p>", reversal)
    assert page == "<p>now. <code>ls &lt;x&gt;</code> Run</p>"
    assert "<code>ls -la &lt;dir&gt;</code>" in translate_page(PAGE, reversal)[0]


def test_every_tag_comes_back_well_formed_whatever_the_order():
    page, _ = translate_page(PAGE, reversal)
    before, after = tags(PAGE), tags(page)
    assert after.balanced and after.starts == before.starts and after.ends == before.ends
    assert "<pre>  do   not\n  touch  </pre><!-- a comment -->" in page


@pytest.mark.parametrize(
    ("broken", "said", "fixed"),
    [
        ("<p>A <b>bold dog</p>", "closed <b> where its block ends", "<p>A <b>bold dog</b></p>"),
        ("<p>A <b>bold <i>big</b> dog</i></p>", "closed <i> before </b>", None),
        ("<p>A dog</em> runs</p>", "kept </em>", "<p>A dog</em> runs</p>"),
        ("<p>A <code>x</p>", "<code> is never closed", None),
    ],
)
def test_malformed_pages_are_repaired_and_said_so_nothing_dropped(broken, said, fixed):
    page, repairs = translate_page(broken, identity)
    assert any(said in repair for repair in repairs), repairs
    if fixed is not None:
        assert page == fixed
    for word in ("A", "dog", "x", "bold"):
        assert (word in broken) <= (word in page)  # nothing dropped


def test_punctuation_outside_an_element_stays_outside():
    page, _ = translate_page("<p>A (<b>big</b>) dog.</p>", reversal)
    assert page == "<p>dog. (<b>big</b>) A</p>"
    page, _ = translate_page('<p>See <a href="#">the dog</a>.</p>', identity)
    assert page == '<p>See <a href="#">the dog</a>.</p>'
    # A model that glues a full stop to the words of <code>: the stop stays, outside.
    glued = [("Run ls.", "0-0 1-1 2-1")]
    page, _ = translate_page("<p>Run <code>ls</code>.</p>", lambda texts: glued)
    assert page == "<p>Run <code>ls</code>.</p>"


def test_other_line_breaks_do_not_shift_what_is_kept():
    """The parser counts lines at "\\n" only: "\\r\\n", "\\r" and U+2028 in the page."""
    page = '<p class="a">One\r\ntwo\rthree\u2028four</p>\r\n<p>\r\n<b>five</b></p>\n'
    got, repairs = translate_page(page, identity)
    assert repairs == []
    assert got.startswith('<p class="a">') and "</p>\r\n<p>" in got and "<b>five</b></p>\n" in got
