"""The live token stream: every token coloured and styled by what happened to it.

Appends with one kept QTextCursor and prebuilt formats, inside one edit block
per refresh tick. Which token lies under a character is found with a sorted
list of start offsets and `bisect` (O(log n), a few bytes per token), so
tooltips and clicks stay instant at tens of thousands of tokens.

Within a pass the order is: accepted drafts, the rejected drafts as struck
ghost text (optional), then the target's token (resampled or bonus). Where
the drafter, K or rule changed mid-run (`Session.changes`), a small marker
(" ⟂ K 4 → 6 ") stands before the first pass under the new setting; it
belongs to no token. A pass that verified a token tree of more than one
branch ends with a small grey count of its branches (" ⋔11"); it belongs to
no token either, and is left out when the text is copied. The selected
pass's highlight is laid again after each append, so it always ends where
that pass ends.

Two layouts: the flowing text, and one pass per line (the layout of
Leviathan et al.'s Figure 1): each pass a row of its accepted drafts, the
rejected draft struck through, then the correction or the bonus; a line
break inside a token is then shown as ↵ so a pass never spans two rows.
A change marker is muted and upright in a grey box, never in a token's
colours, so it cannot be read as generated text.
"""

from __future__ import annotations

import html
from bisect import bisect_left, bisect_right

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QColor, QFont, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextFormat
from PySide6.QtWidgets import QPlainTextEdit, QTextEdit, QToolTip

from app.engine.events import ASD_EXCEPTION, CLIPPED, REJECTED, AppendedToken, DraftedToken, PassEvent
from app.widgets import token_style as ts
from app.widgets.chart_export import install_html_export
from app.widgets.run_view import RunView, bound
from app.widgets.tree_view import branch_count, tested_count

GHOST_NEWLINE = "↵"
# Qt lays out a whole paragraph again whenever text is appended to it, and
# paints every visible paragraph whole, so one endless paragraph would make
# every tick slower. Past SOFT_BLOCK characters a paragraph is ended before a
# token that starts with a space (where word wrap could break the line anyway);
# past HARD_BLOCK anywhere (text without spaces: CJK, code, random tokens).
SOFT_BLOCK = 1500
HARD_BLOCK = 2000
# Marks a paragraph that only continues the one before it: copying joins them without a line break.
CONTINUES = ts.CONTINUES_PROPERTY
PARAGRAPH_SEPARATOR = "\u2029"  # how Qt's selectedText() separates paragraphs
MARKER_COLOURS = ("#4d5663", "#c3cad4", "#eef1f5", "#2a3038")  # change markers: text light, dark; box light, dark
TREE_MARK = "⋔"  # before the branch count of a tree pass
PARTIAL_TOKEN = "▯"  # one pass per line: a token that is only part of a character (its text comes later)


class TokenView(QPlainTextEdit):
    """Read-only, colour-coded token stream; clicking a token emits its pass index."""

    sig_pass_selected = Signal(int)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)
        self.setMouseTracking(True)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setPlaceholderText("Generated text appears here, token by token.")
        install_html_export(self, "token-stream")  # right-click: save the stream as HTML for slides
        self._session: RunView | None = None
        self._hide_rejected = False
        self._formats = ts.make_formats(ts.is_dark(self.palette()))
        self._continuation = QTextBlockFormat()
        self._continuation.setProperty(CONTINUES, True)
        self._paragraph = QTextBlockFormat()  # a line break of the text itself
        self._pass_rows = False  # one pass per line
        self._row_format = QTextBlockFormat()
        self._row_format.setProperty(ts.PASS_ROW_PROPERTY, True)
        self._marker_format = change_marker_format(ts.is_dark(self.palette()))
        self._tree_format = tree_mark_format()
        self._clear_index()

    # --- data binding --------------------------------------------------------
    def set_session(self, session: RunView) -> None:
        self._session = session
        session.sig_refresh.connect(self.refresh)

    def token_start(self, index: int) -> int:
        """Document offset where token `index` (in the order shown) starts."""
        return self._starts[index]

    def _clear_index(self) -> None:
        self._starts: list[int] = []  # document offset where each token starts
        self._refs: list[tuple[int, int]] = []  # (row in session.passes, drafted slot or -1 = appended)
        self._rendered = 0  # passes rendered so far
        self._marks: list[int] = []  # document offsets where markers (not tokens) start: changes and trees
        self._mark_lengths: list[int] = []
        self._mark_passes: list[int | None] = []  # a tree marker's row in session.passes; None: a change marker
        self._changes_shown = 0  # Session.changes already marked
        self._selected_row: int | None = None  # the highlighted pass
        self._prompt_shown = False
        self._cursor = QTextCursor(self.document())
        self._cursor.movePosition(QTextCursor.MoveOperation.End)

    def clear_view(self) -> None:
        self.document().clear()
        self.setExtraSelections([])
        self._clear_index()

    @property
    def hide_rejected(self) -> bool:
        return self._hide_rejected

    def set_hide_rejected(self, hide: bool) -> None:
        if hide != self._hide_rejected:
            self._hide_rejected = hide
            self.rebuild()

    @property
    def pass_rows(self) -> bool:
        return self._pass_rows

    def set_pass_rows(self, on: bool) -> None:
        """One pass per line (True) or the flowing text (False)."""
        if on != self._pass_rows:
            self._pass_rows = on
            self.rebuild()

    def set_text_px(self, px: int) -> None:
        """The stream's text size in pixels (presentation mode's large text)."""
        font = QFont(self.font())
        font.setPixelSize(px)
        self.setFont(font)
        self.document().setDefaultFont(font)

    def style_of(self, name: str) -> QTextCharFormat:
        """The character format of an outcome (ts.STYLE_NAMES) as drawn now."""
        return QTextCharFormat(self._formats[name])

    def rows(self) -> list[list[str]]:
        """One pass per line: the outcome names of each pass row's fragments, in order (for tests)."""
        rows = []
        block = self.document().begin()
        while block.isValid():
            if block.blockFormat().boolProperty(ts.PASS_ROW_PROPERTY):
                rows.append(block_outcomes(block))
            block = block.next()
        return rows

    def rebuild(self) -> None:
        """Re-render the whole run (theme or ghost-text toggle changed)."""
        self.clear_view()
        self.refresh()

    # --- rendering -----------------------------------------------------------
    def refresh(self) -> None:
        session = self._session
        if session is None:
            return
        pending = len(session.passes) - self._rendered
        if pending <= 0 and (self._prompt_shown or session.start is None):
            return
        bar = self.verticalScrollBar()
        follow = bar.value() >= bar.maximum() - 4
        self._cursor.beginEditBlock()
        if not self._prompt_shown and session.start is not None:
            self._insert_text(session.start.prompt_text, self._formats[ts.PROMPT])
            self._prompt_shown = True
        for row in range(self._rendered, len(session.passes)):
            self._insert_change_marker(row)
            self._insert_pass(row, session.passes[row])
        self._cursor.endEditBlock()
        self._rendered = len(session.passes)
        if self._selected_row is not None:
            self._highlight_pass(self._selected_row)  # text appended at its end must not join it
        if follow:
            bar.setValue(bar.maximum())

    def _insert_pass(self, row: int, event: PassEvent) -> None:
        if self._pass_rows:
            self._cursor.insertBlock(self._row_format)
        kept = [(i, t) for i, t in enumerate(event.drafted) if t.outcome not in (REJECTED, CLIPPED)]
        for slot, token in kept:
            self._insert(row, slot, token.text, ts.ASD_EXCEPTION if token.outcome == ASD_EXCEPTION else ts.ACCEPTED)
        if not self._hide_rejected:
            for slot, token in enumerate(event.drafted):
                if token.outcome == REJECTED:
                    self._insert(row, slot, token.text.replace("\n", GHOST_NEWLINE), ts.REJECTED)
        if event.appended is not None:
            self._insert(row, -1, event.appended.text, event.appended.kind)
        branches = branch_count(event.tree) if event.tree is not None else 0
        if branches > 1:
            self._insert_mark(f"{TREE_MARK}{branches}", self._tree_format, row)

    def _insert_change_marker(self, row: int) -> None:
        """Mark where a setting changed: before the first pass under the new one."""
        changes = bound(self._session).changes
        while self._changes_shown < len(changes) and changes[self._changes_shown].row <= row:
            change = changes[self._changes_shown]
            self._changes_shown += 1
            if change.row == row:
                self._insert_mark(f" ⟂ {change.text} ", self._marker_format, None)

    def _insert_mark(self, text: str, char_format: QTextCharFormat, tree_row: int | None) -> None:
        self._marks.append(self._cursor.position())
        self._mark_lengths.append(len(text.encode("utf-16-le")) // 2)  # document positions: UTF-16
        self._mark_passes.append(tree_row)
        self._cursor.insertText(text, char_format)

    def _insert(self, row: int, slot: int, text: str, style: str) -> None:
        if not text and self._pass_rows:
            text = PARTIAL_TOKEN  # a row shows every token of its pass, even a piece of a character
        if not text:
            return
        self._limit_block_length(text)
        self._starts.append(self._cursor.position())
        self._refs.append((row, slot))
        self._insert_text(text, self._formats.get(style, self._formats[ts.TARGET]))

    def _insert_text(self, text: str, char_format) -> None:
        """Insert with the text's own line breaks as plain paragraphs (never inheriting a continuation mark);
        one pass per line shows them as ↵ after the prompt."""
        if self._pass_rows and self._prompt_shown:
            self._cursor.insertText(text.replace("\n", GHOST_NEWLINE), char_format)
            return
        first, *lines = text.split("\n")
        self._cursor.insertText(first, char_format)
        for line in lines:
            self._cursor.insertBlock(self._paragraph, char_format)
            self._cursor.insertText(line, char_format)

    def _limit_block_length(self, text: str) -> None:
        """End a long paragraph before a token that starts a word (BPE tokens carry the leading space)."""
        length = self._cursor.positionInBlock()
        if self._pass_rows:
            return  # a row is one pass: short, and never split
        if length > HARD_BLOCK or (length > SOFT_BLOCK and text[:1] in (" ", "\t")):
            self._cursor.insertBlock(self._continuation)

    # --- copying ---------------------------------------------------------------
    def createMimeDataFromSelection(self):
        """The selected text as generated: line breaks only where the text has them, not where the view split it."""
        # Qt's own object (owned by Qt, like the clipboard that takes it): it fills in its plain text and HTML
        # lazily on first read, so read once, then replace the plain text.
        mime = super().createMimeDataFromSelection()
        mime.text()
        mime.setText(self.selected_text())
        return mime

    def selected_text(self) -> str:
        cursor = self.textCursor()
        start, end = cursor.selectionStart(), cursor.selectionEnd()
        pieces = self._text_without_tree_marks(start, end).split(PARAGRAPH_SEPARATOR)
        block = self.document().findBlock(start).next()
        joined = [pieces[0]]
        for piece in pieces[1:]:  # one piece per paragraph the selection reaches, in order
            joined.append("" if block.blockFormat().boolProperty(CONTINUES) else "\n")
            joined.append(piece)
            block = block.next()
        return "".join(joined)

    def _text_without_tree_marks(self, start: int, end: int) -> str:
        """The document's text from `start` to `end` (paragraphs separated as in selectedText), tree marks left out."""
        cursor = QTextCursor(self.document())
        pieces, at = [], start
        first = max(bisect_left(self._marks, start) - 1, 0)
        for mark, length, tree_row in zip(self._marks[first:], self._mark_lengths[first:], self._mark_passes[first:],
                                          strict=True):
            if mark >= end:
                break
            if tree_row is None or mark + length <= at:
                continue
            pieces.append(self._text_of_range(cursor, at, max(at, mark)))
            at = min(end, mark + length)
        pieces.append(self._text_of_range(cursor, at, end))
        return "".join(pieces)

    @staticmethod
    def _text_of_range(cursor: QTextCursor, start: int, end: int) -> str:
        if end <= start:
            return ""
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        return cursor.selectedText()

    # --- lookup ----------------------------------------------------------------
    @property
    def token_count(self) -> int:
        return len(self._starts)

    def token_at(self, position: int) -> int | None:
        """Index of the token covering document offset `position`, if any."""
        i = bisect_right(self._starts, position) - 1
        if i < 0:
            return None
        return i if position < self._token_end(i) else None

    def _token_end(self, i: int) -> int:
        """Where token `i` ends: the next token, a change marker, or the end of the text."""
        end = self._starts[i + 1] if i + 1 < len(self._starts) else self._cursor.position()
        mark = bisect_right(self._marks, self._starts[i])
        return min(end, self._marks[mark]) if mark < len(self._marks) else end

    def change_marks(self) -> list[str]:
        """The text of each change marker shown (for tests)."""
        return self._mark_texts(tree=False)

    def tree_marks(self) -> list[str]:
        """The text of each tree pass's branch count shown (for tests)."""
        return self._mark_texts(tree=True)

    def _mark_texts(self, tree: bool) -> list[str]:
        cursor = QTextCursor(self.document())
        return [self._text_of_range(cursor, start, start + length).strip()
                for start, length, tree_row in zip(self._marks, self._mark_lengths, self._mark_passes, strict=True)
                if (tree_row is not None) == tree]

    def _tree_mark_at(self, position: int) -> int | None:
        """The pass row of the tree marker covering document offset `position`, if any."""
        i = bisect_right(self._marks, position) - 1
        if i < 0 or self._mark_passes[i] is None or position >= self._marks[i] + self._mark_lengths[i]:
            return None
        return self._mark_passes[i]

    def token_info(self, index: int) -> tuple[PassEvent, DraftedToken | AppendedToken]:
        row, slot = self._refs[index]
        event = bound(self._session).passes[row]
        appended = event.appended
        return event, (appended if slot < 0 and appended is not None else event.drafted[slot])

    def _token_under(self, pos) -> int | None:
        return self.token_at(self._position_under(pos))

    def _position_under(self, pos) -> int:
        cursor = self.cursorForPosition(pos)
        position = cursor.position()
        # cursorForPosition snaps to the nearest boundary; step back when the
        # mouse is on the left half of the character after it.
        if self.cursorRect(cursor).center().x() > pos.x() and position > 0:
            position -= 1
        return position

    # --- interaction -----------------------------------------------------------
    def viewportEvent(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            index = self._token_under(event.pos())
            tree_row = None if index is not None else self._tree_mark_at(self._position_under(event.pos()))
            if index is not None:
                QToolTip.showText(event.globalPos(), tooltip_text(*self.token_info(index)), self.viewport())
            elif tree_row is not None:
                QToolTip.showText(event.globalPos(), tree_text(bound(self._session).passes[tree_row]), self.viewport())
            else:
                QToolTip.hideText()
            return True
        return super().viewportEvent(event)

    def mouseReleaseEvent(self, event) -> None:
        super().mouseReleaseEvent(event)
        if event.button() == Qt.MouseButton.LeftButton and not self.textCursor().hasSelection():
            index = self._token_under(event.position().toPoint())
            if index is not None:
                self.select_pass(self._refs[index][0])

    def select_pass(self, row: int) -> None:
        """Highlight the tokens of pass `row` (a row of session.passes) and announce its pass index."""
        if self._session is None or not 0 <= row < len(self._session.passes):
            return
        self._selected_row = row
        self._highlight_pass(row)
        self.sig_pass_selected.emit(self._session.passes[row].index)

    def highlight_pass(self, index: int) -> None:
        """Highlight the tokens of the pass with this index, announcing nothing (the inspector moved to it)."""
        if self._session is None:
            return
        row = next((r for r, event in enumerate(self._session.passes) if event.index == index), None)
        if row is not None and row != self._selected_row:
            self._selected_row = row
            self._highlight_pass(row)

    def _highlight_pass(self, row: int) -> None:
        indices = self._pass_token_range(row)
        if not indices:
            self.setExtraSelections([])
            return
        start, end = self._starts[indices[0]], self._token_end(indices[-1])
        selection = QTextEdit.ExtraSelection()
        selection.cursor = QTextCursor(self.document())
        selection.cursor.setPosition(start)
        selection.cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        selection.format.setProperty(QTextFormat.Property.OutlinePen, QColor("#e69f00"))
        selection.format.setBackground(QColor(230, 159, 0, 70))
        self.setExtraSelections([selection])

    def _pass_token_range(self, row: int) -> range:
        """Token indices of pass `row`: rows are non-decreasing along the document."""
        rows = _RowsView(self._refs)
        lo = _lower_bound(rows, row)
        hi = _lower_bound(rows, row + 1)
        return range(lo, hi)

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._formats = ts.make_formats(ts.is_dark(self.palette()))
            self._marker_format = change_marker_format(ts.is_dark(self.palette()))
            self.rebuild()


def tree_mark_format() -> QTextCharFormat:
    """A tree pass's branch count: small grey superscript, no text."""
    fmt = QTextCharFormat()
    fmt.setProperty(ts.TREE_MARK_PROPERTY, True)
    fmt.setForeground(QColor("#767676"))  # 4.5:1 on white
    fmt.setVerticalAlignment(QTextCharFormat.VerticalAlignment.AlignSuperScript)
    fmt.setFontWeight(QFont.Weight.Normal)
    return fmt


def change_marker_format(dark: bool) -> QTextCharFormat:
    """A change marker: muted grey, upright, normal weight, smaller, in a grey box: not a token's look."""
    text_light, text_dark, box_light, box_dark = MARKER_COLOURS
    fmt = QTextCharFormat()
    fmt.setProperty(ts.CHANGE_MARK_PROPERTY, True)
    fmt.setForeground(QColor(text_dark if dark else text_light))
    fmt.setBackground(QColor(box_dark if dark else box_light))
    fmt.setFontWeight(QFont.Weight.Normal)
    fmt.setFontItalic(False)
    fmt.setVerticalAlignment(QTextCharFormat.VerticalAlignment.AlignMiddle)
    fmt.setToolTip("Not generated text: the drafter, K or verification rule changed here")
    return fmt


def block_outcomes(block) -> list[str]:
    """The outcome names carried by the character formats of one text block's fragments, in order."""
    names = []
    it = block.begin()
    while not it.atEnd():
        fragment = it.fragment()
        if fragment.isValid():
            name = ts.outcome_of(fragment.charFormat())
            if name:
                names.append(name)
        it += 1
    return names


class _RowsView:
    """Sequence view of the pass rows of `refs`, for binary search without copying."""

    def __init__(self, refs: list[tuple[int, int]]) -> None:
        self._refs = refs

    def __len__(self) -> int:
        return len(self._refs)

    def __getitem__(self, i: int) -> int:
        return self._refs[i][0]


def _lower_bound(seq, value: int) -> int:
    lo, hi = 0, len(seq)
    while lo < hi:
        mid = (lo + hi) // 2
        if seq[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


def tooltip_text(event: PassEvent, token: DraftedToken | AppendedToken) -> str:
    """What a hover shows: who proposed it, in which pass, and the numbers behind the verdict."""
    shown = f"<b>{html.escape(repr(token.text))}</b>"
    tree = [tree_text(event)] if event.tree is not None else []
    if isinstance(token, AppendedToken):
        return "<br>".join([f"{shown} — {ts.LABELS.get(token.kind, token.kind)} (from the target)",
                            f"pass {event.index} · verify {event.verify}", f"p(x) = {token.p:.4f}"] + tree)
    q = "one-hot (deterministic drafter)" if token.q is None else f"{token.q:.4f}"
    lines = [f"{shown} — {ts.LABELS.get(token.outcome, token.outcome)}",
             f"drafter {html.escape(str(event.drafter))} · pass {event.index} · verify {event.verify}",
             f"p(x) = {token.p:.4f} &nbsp; q(x) = {q}",
             _verdict_line(event, token)]
    if token.regret is not None:
        lines.append(f"ASD regret = {token.regret:.4f}")
    return "<br>".join(lines + tree)


def tree_text(event: PassEvent) -> str:
    """A tree pass in one line: its size, branches and how far the target tested it."""
    tree = event.tree or ()
    return (f"token tree of pass {event.index}: {len(tree)} nodes, {branch_count(tree)} branches, "
            f"{tested_count(tree)} tested by the target, {len(event.path or ())} accepted")


def _verdict_line(event: PassEvent, token: DraftedToken) -> str:
    """Why the verifier decided as it did, in the rule's own terms: greedy compares with the target's argmax
    (p/q plays no part); sampling keeps a draft when u <= min(1, p/q)."""
    if event.verify != "greedy":
        return f"acceptance min(1, p/q) = {_acceptance(token):.4f}"
    if token.outcome == REJECTED:
        return ("greedy: rejected because it is not the target's most likely token (argmax p) — "
                "however high p(x) is, only the argmax is kept")
    return "greedy: kept because it is the target's most likely token (argmax p)"


def _acceptance(token: DraftedToken) -> float:
    if token.accept_prob is not None:
        return token.accept_prob
    q = 1.0 if token.q is None else token.q
    return min(1.0, token.p / q) if q > 0 else 1.0
