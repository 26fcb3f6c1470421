"""GBNF grammars in llguidance's Lark, converted in time linear in the grammar's size."""

from __future__ import annotations

from llguidance import gbnf_to_lark


def to_lark(text: str) -> str:
    """A GBNF grammar as llguidance's `any_to_lark` writes it (Lark as it is), but with the
    terminal rules marked in one walk first: its own passes add one link of a chain each."""
    if gbnf_to_lark.is_lark_syntax(text):
        return text
    rules = gbnf_to_lark.GrammarParser().parse(text)
    _mark_terminals(rules)
    gbnf_to_lark.resolve(rules)
    # As `gbnf_to_lark` writes the rules: in order, a rule of several lines set apart.
    out = ["%llguidance {}\n\n"]
    prev_nl = True
    for rule in sorted(rules.values(), key=lambda r: r.order):
        line = str(rule)
        if not prev_nl and "\n" in line:
            out.append("\n")
        out.append(line + "\n")
        prev_nl = "\n" in line
        if prev_nl:
            out.append("\n")
    return "".join(out)


def _mark_terminals(rules: dict[str, gbnf_to_lark.RuleNode]) -> None:
    """Mark the rules `resolve` would find terminal: those referring only to terminals, never to
    `root` nor to an undefined rule; found from the leaves up."""
    waiting: dict[str, int] = {}
    used_by: dict[str, list[str]] = {name: [] for name in rules}
    for name, rule in rules.items():
        refs = _references(rule)
        waiting[name] = len(refs) + (name == "root")
        for ref in refs:
            if ref in used_by:
                used_by[ref].append(name)
    ready = [name for name, count in waiting.items() if count == 0]
    while ready:
        name = ready.pop()
        rules[name].rule_is_terminal = True
        for user in used_by[name]:
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)


def _references(rule: gbnf_to_lark.RuleNode) -> list[str]:
    """The rule names `rule` refers to, once per reference (an explicit stack: too deep a
    grammar is the converter's to refuse, not a crash here)."""
    names: list[str] = []
    stack: list[gbnf_to_lark.ASTNode] = [rule.alternatives]
    while stack:
        node = stack.pop()
        if isinstance(node, gbnf_to_lark.RuleRefNode):
            names.append(node.name)
        stack.extend(node.children())
    return names
