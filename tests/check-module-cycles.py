#!/usr/bin/env python3
"""Fails when the modules of a Rust source folder depend on each other in a cycle.

    python3 tests/check-module-cycles.py [--verbose] [--ignore-tests] DIR...

DIR is a folder of a crate's sources: the crate's own (device/src) or a module's
(device/src/rdma). Its modules are the `mod NAME;` declarations of its root file (lib.rs or
main.rs, mod.rs, or the DIR.rs beside it); each one is NAME.rs and everything under NAME/.
Module A depends on module B when a file of A names a path into B:

- `use crate::b::...`, `use super::b::...` (groups too: `use crate::{b::X, c}`),
- `crate::b::...`, `$crate::b::...`, `super::super::b::...` anywhere in the code,
- a name that the root file brings in from B (`pub use b::X;` in mod.rs), reached as
  `super::X` or `crate::...::X`.

Comments and string literals do not count; code under `#[cfg(test)]` does, unless
--ignore-tests. Glob imports (`use super::*`) name no module and are passed over, as are
the root file's own references.

Prints each cycle (a strongly connected set of modules, and the shortest cycle through
it) with the file and line of every dependency that makes it; with --verbose, also every
other dependency inside the set. Exits 0 when no DIR has a cycle, 1 when one has, 2 on a
usage error.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict, deque
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def blank_comments_and_strings(text: str) -> str:
    """`text` with comments and the insides of string and char literals turned into
    spaces (newlines kept), so offsets and lines stay as they were."""
    out = list(text)
    n = len(text)
    i = 0

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (
            i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
        ):
            close = '"' + m.group(1)
            j = text.find(close, m.end())
            j = n if j < 0 else j + len(close)
            blank(m.end(), j - len(close))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, j)
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{1F600}'), or a lifetime ('a), left alone.
            if i + 1 < n and text[i + 1] == "\\":
                j = text.find("'", i + 2)
                j = n if j < 0 else j
                blank(i + 1, j)
                i = j + 1
            elif i + 2 < n and text[i + 2] == "'":
                blank(i + 1, i + 2)
                i += 3
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def split_top(s: str) -> list[str]:
    """`s` split at the commas outside braces."""
    parts, depth, start = [], 0, 0
    for k, c in enumerate(s):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(s[start:k])
            start = k + 1
    parts.append(s[start:])
    return [p.strip() for p in parts if p.strip()]


def use_tree_paths(tree: str, prefix: list[str]) -> list[tuple[list[str], str | None]]:
    """The paths a use tree imports, each with the name it binds (None for a glob)."""
    tree = re.sub(r"\s+", " ", tree).strip()
    brace = tree.find("{")
    if brace >= 0:
        head = [s.strip() for s in tree[:brace].split("::") if s.strip()]
        inner = tree[brace + 1 : tree.rfind("}")]
        paths = []
        for part in split_top(inner):
            paths.extend(use_tree_paths(part, prefix + head))
        return paths
    alias = None
    if " as " in tree:
        tree, alias = (s.strip() for s in tree.split(" as ", 1))
    segs = [s.strip() for s in tree.split("::") if s.strip()]
    if segs and segs[0] == "::":
        segs = segs[1:]
    full = prefix + segs
    if not full:
        return []
    if full[-1] == "*":
        return [(full, None)]
    if full[-1] == "self":
        full = full[:-1]
    return [(full, alias or (full[-1] if full else None))]


USE_RE = re.compile(r"(?<![\w$])use\s+(::)?([^;]*);")
PATH_RE = re.compile(rf"(?<![\w:])(\$?crate|super|self)((?:\s*::\s*{IDENT})+)")
CFG_TEST_RE = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")
TEST_CHILD_RE = re.compile(rf"\s*(?:#\s*\[[^\]]*\]\s*)*(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+({IDENT})\s*;")
MOD_DECL_RE = re.compile(rf"(?<![\w])(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+({IDENT})\s*;")
INLINE_MOD_RE = re.compile(rf"(?<![\w])mod\s+({IDENT})\s*\{{")


class Source:
    """One file: its blanked text, its module path, and where its inline modules are."""

    def __init__(self, path: Path, module: list[str], ignore_tests: bool):
        self.path = path
        self.module = module
        self.text = blank_comments_and_strings(path.read_text(encoding="utf-8"))
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        # (start, end, name) of each inline `mod name { ... }`, to resolve `super::`.
        self.inline = []
        for m in INLINE_MOD_RE.finditer(self.text):
            self.inline.append((m.end() - 1, self.matching_brace(m.end() - 1), m.group(1)))
        # The items under `#[cfg(test)]` (a `mod tests { ... }`, a `use`, a function),
        # and the modules declared there (`#[cfg(test)] mod tests;`).
        self.test_spans = []
        self.test_children = set()
        for m in CFG_TEST_RE.finditer(self.text):
            end = self.item_end(m.end())
            self.test_spans.append((m.start(), end))
            if child := TEST_CHILD_RE.match(self.text, m.end()):
                self.test_children.add(child.group(1))
        self.skipped = self.test_spans if ignore_tests else []

    def item_end(self, start: int) -> int:
        """Where the item that starts at `start` ends: its `;`, or its block's `}`."""
        depth = 0
        for k in range(start, len(self.text)):
            c = self.text[k]
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif c == ";" and depth == 0:
                return k
            elif c == "{" and depth == 0:
                return self.matching_brace(k)
        return len(self.text)

    def matching_brace(self, open_at: int) -> int:
        depth = 0
        for k in range(open_at, len(self.text)):
            if self.text[k] == "{":
                depth += 1
            elif self.text[k] == "}":
                depth -= 1
                if depth == 0:
                    return k
        return len(self.text)

    def line(self, offset: int) -> int:
        lo, hi = 0, len(self.line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def module_at(self, offset: int) -> list[str]:
        inner = [name for a, b, name in self.inline if a < offset < b]
        return self.module + inner

    def skipped_at(self, offset: int) -> bool:
        return any(a <= offset <= b for a, b in self.skipped)

    def references(self, children: frozenset[str] = frozenset()):
        """(offset, absolute path, bound name) of every path this file names; the bound
        name is set for a `use` that brings a name in. A `use` path that starts with one
        of `children` (`use qp::Qp` in mod.rs) is relative to this file's module."""
        refs = []
        rest = list(self.text)
        for m in USE_RE.finditer(self.text):
            if self.skipped_at(m.start()):
                continue
            here = self.module_at(m.start())
            for segs, bound in use_tree_paths(m.group(2), []):
                if segs and segs[0] in children and not m.group(1):
                    segs = ["self"] + segs
                absolute = resolve(segs, here)
                if absolute is not None:
                    refs.append((m.start(), absolute, bound))
            for k in range(m.start(), m.end()):
                if rest[k] != "\n":
                    rest[k] = " "
        rest = "".join(rest)
        for m in PATH_RE.finditer(rest):
            if self.skipped_at(m.start()):
                continue
            segs = [m.group(1)] + [s.strip() for s in m.group(2).split("::") if s.strip()]
            absolute = resolve(segs, self.module_at(m.start()))
            if absolute is not None:
                refs.append((m.start(), absolute, None))
        return refs


def resolve(segs: list[str], here: list[str]) -> list[str] | None:
    """The crate-absolute form of a path named in module `here`; None for one that starts
    elsewhere (another crate, a local name)."""
    if not segs:
        return None
    if segs[0] in ("crate", "$crate"):
        return segs[1:]
    if segs[0] == "self":
        return here + segs[1:]
    if segs[0] == "super":
        k = 0
        while k < len(segs) and segs[k] == "super":
            k += 1
        if k > len(here):
            return None
        return here[: len(here) - k] + segs[k:]
    return None


def crate_root(folder: Path) -> Path | None:
    """The folder holding the crate root (lib.rs, else main.rs) that `folder` is under."""
    for d in [folder, *folder.parents]:
        if (d / "lib.rs").is_file() or (d / "main.rs").is_file():
            return d
        if (d / "Cargo.toml").is_file():
            break
    return None


def root_file(folder: Path, is_crate_root: bool) -> Path | None:
    names = ["lib.rs", "main.rs"] if is_crate_root else ["mod.rs"]
    for name in names:
        if (folder / name).is_file():
            return folder / name
    beside = folder.parent / (folder.name + ".rs")
    if not is_crate_root and beside.is_file():
        return beside
    return None


def module_files(folder: Path, name: str) -> list[tuple[Path, list[str]]]:
    """Every file of module `name` of `folder`, with its path relative to the module."""
    files = []
    single = folder / f"{name}.rs"
    if single.is_file():
        files.append((single, []))
    sub = folder / name
    if sub.is_dir():
        for f in sorted(sub.rglob("*.rs")):
            rel = list(f.relative_to(sub).with_suffix("").parts)
            if rel and rel[-1] == "mod":
                rel = rel[:-1]
            files.append((f, rel))
    return files


class Graph:
    """The modules of one folder and the references between them."""

    def __init__(self, folder: Path, ignore_tests: bool):
        folder = folder.resolve()
        croot = crate_root(folder)
        if croot is None:
            raise SystemExit(f"{folder}: no lib.rs or main.rs here or above it (below Cargo.toml)")
        self.folder = folder
        self.base = list(folder.relative_to(croot).parts)
        root = root_file(folder, folder == croot)
        if root is None:
            raise SystemExit(f"{folder}: no root file (lib.rs, main.rs, mod.rs or ../{folder.name}.rs)")
        root_src = Source(root, self.base, ignore_tests)
        self.modules = [
            m.group(1)
            for m in MOD_DECL_RE.finditer(root_src.text)
            if m.group(1) not in root_src.test_children
        ]
        mods = set(self.modules)
        # Names the root file brings in from a module: `pub use qp::Qp` makes `Qp` qp's.
        self.reexports = {}
        for _, absolute, bound in root_src.references(frozenset(mods)):
            if bound and self.module_of(absolute, mods):
                self.reexports[bound] = self.module_of(absolute, mods)
        # edges[a][b] = [(file, line), ...]: a's references into b.
        self.edges = defaultdict(lambda: defaultdict(list))
        for name in self.modules:
            sources = {
                tuple(rel): Source(path, self.base + [name] + rel, ignore_tests)
                for path, rel in module_files(folder, name)
            }
            test_only = set()
            for rel in sorted(sources, key=len):
                parent = sources.get(rel[:-1])
                if rel and parent and (rel[:-1] in test_only or rel[-1] in parent.test_children):
                    test_only.add(rel)
            for rel, src in sources.items():
                if ignore_tests and rel in test_only:
                    continue
                path = src.path
                for offset, absolute, _ in src.references():
                    target = self.module_of(absolute, mods)
                    if target and target != name:
                        self.edges[name][target].append((path, src.line(offset)))

    def module_of(self, absolute: list[str], mods: set[str]) -> str | None:
        """The module of this folder that a crate-absolute path leads into, if any."""
        n = len(self.base)
        if absolute[:n] != self.base or len(absolute) <= n:
            return None
        first = absolute[n]
        if first in mods:
            return first
        return self.reexports.get(first)

    def cycles(self) -> list[list[str]]:
        """The strongly connected sets of more than one module (Tarjan), each sorted."""
        index, low, on_stack, stack, sets = {}, {}, set(), [], []
        counter = [0]

        def visit(v: str) -> None:
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on_stack.add(v)
            for w in sorted(self.edges[v]):
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                members = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    members.append(w)
                    if w == v:
                        break
                if len(members) > 1:
                    sets.append(sorted(members))

        sys.setrecursionlimit(max(1000, 10 * len(self.modules)))
        for v in sorted(self.modules):
            if v not in index:
                visit(v)
        return sorted(sets)

    def shortest_cycle(self, members: list[str]) -> list[str]:
        """The shortest cycle inside `members` through its first module, as a list of
        modules that ends where it starts."""
        inside = set(members)
        start = members[0]
        came_from = {start: None}
        queue = deque([start])
        while queue:
            v = queue.popleft()
            for w in sorted(self.edges[v]):
                if w not in inside:
                    continue
                if w == start:
                    path = [v]
                    while came_from[path[-1]] is not None:
                        path.append(came_from[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in came_from:
                    came_from[w] = v
                    queue.append(w)
        return []


def describe(graph: Graph, a: str, b: str, root: Path) -> list[str]:
    """`a -> b:` and, below it, each line of a that names b: file, line number, code."""
    out = [f"  {a} -> {b}:"]
    for path, line in sorted(set(graph.edges[a][b])):
        code = path.read_text(encoding="utf-8").splitlines()[line - 1].strip()
        if len(code) > 100:
            code = code[:97] + "..."
        out.append(f"    {shown(path, root)}:{line}: {code}")
    return out


def shown(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Fails when the modules of a Rust source folder depend on each other in a cycle."
    )
    parser.add_argument("folders", nargs="+", metavar="DIR", help="a crate's or a module's source folder")
    parser.add_argument("--ignore-tests", action="store_true", help="leave out code under #[cfg(test)]")
    parser.add_argument("--verbose", action="store_true", help="also list every other dependency inside a cycle")
    args = parser.parse_args(argv)
    cwd = Path.cwd().resolve()
    found = False
    for folder in args.folders:
        if not Path(folder).is_dir():
            print(f"check-module-cycles: {folder} is not a folder", file=sys.stderr)
            return 2
        graph = Graph(Path(folder), args.ignore_tests)
        label = shown(graph.folder, cwd)
        sets = graph.cycles()
        n_edges = sum(len(t) for t in graph.edges.values())
        if not sets:
            print(f"{label}: {len(graph.modules)} modules, {n_edges} dependencies between them, no cycle")
            continue
        found = True
        for members in sets:
            cycle = graph.shortest_cycle(members)
            print(
                f"{label}: a cycle of {len(members)} modules: {', '.join(members)}\n"
                f" the shortest through {members[0]}: {' -> '.join(cycle)}"
            )
            out = []
            for a, b in zip(cycle, cycle[1:]):
                out.extend(describe(graph, a, b, cwd))
            if args.verbose:
                inside = set(members)
                rest = [
                    (a, b)
                    for a in members
                    for b in sorted(graph.edges[a])
                    if b in inside and (a, b) not in set(zip(cycle, cycle[1:]))
                ]
                if rest:
                    out.append(" the other dependencies inside it:")
                    for a, b in rest:
                        out.extend(describe(graph, a, b, cwd))
            print("\n".join(out))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
