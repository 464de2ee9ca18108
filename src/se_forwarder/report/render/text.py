"""The workbooks' text items (Markdown) as HTML, by markdown-it-py (CommonMark): raw HTML in the
text is escaped, links keep their text but not their target (the page opens offline and requests
nothing), an image is its alt text, and headings sit below the panel titles (``#`` is an h3)."""

from __future__ import annotations

from functools import cache

from markdown_it import MarkdownIt
from markdown_it.token import Token
from markupsafe import Markup

HEADING_SHIFT = 2  # "#" -> h3: the page's h1 is its title, h2 a section


@cache
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False})


def markdown(source: str) -> Markup:
    md = _parser()
    tokens = md.parse(source)
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(6, int(token.tag[1]) + HEADING_SHIFT)}"
        if token.children:
            token.children = [
                _offline(child)
                for child in token.children
                if child.type not in ("link_open", "link_close")
            ]
    return Markup(md.renderer.render(tokens, md.options, {}))


def _offline(token: Token) -> Token:
    """An image becomes its alt text; anything else is kept."""
    if token.type != "image":
        return token
    return Token("text", "", 0, content=token.content)
